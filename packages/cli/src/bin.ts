#!/usr/bin/env node
// The `outbox` command (docs/cli.md).
import { runOutboxCli } from './run-outbox-cli.js';

process.exitCode = await runOutboxCli(process.argv.slice(2));

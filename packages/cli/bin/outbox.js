#!/usr/bin/env node
// The installed `outbox` command. It lives outside dist/ so that installing the workspace can link
// it before anything is built (in the repository, `pnpm outbox` runs the sources: no build needed).
await import('../dist/bin.js');

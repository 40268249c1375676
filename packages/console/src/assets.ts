// The console's only asset, served by the plugin itself (no CDN, no build step): a stylesheet. The
// pages need no script: links and plain HTML forms do every interaction (docs/console.md says why).
export const CONSOLE_CSS = `
:root { color-scheme: light dark; --fg: #1b1f24; --bg: #fff; --muted: #59636e; --line: #d1d9e0; --bad: #b3261e; --good: #1a7f37; --warn: #9a6700; --accent: #0550ae; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6edf3; --bg: #0d1117; --muted: #9198a1; --line: #3d444d; --bad: #ff7b72; --good: #3fb950; --warn: #d29922; --accent: #4493f8; } }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, sans-serif; color: var(--fg); background: var(--bg); }
a { color: var(--accent); }
a:focus-visible, button:focus-visible, input:focus-visible, select:focus-visible, textarea:focus-visible, summary:focus-visible { outline: 3px solid var(--accent); outline-offset: 2px; }
.skip { position: absolute; left: -999px; } .skip:focus { left: 8px; top: 8px; background: var(--bg); padding: 4px 8px; z-index: 1; }
header { border-bottom: 1px solid var(--line); padding: 8px 16px; display: flex; gap: 24px; align-items: baseline; flex-wrap: wrap; }
header strong { font-size: 16px; }
nav ul { list-style: none; display: flex; gap: 16px; margin: 0; padding: 0; flex-wrap: wrap; }
nav a[aria-current="page"] { font-weight: 700; text-decoration: none; color: var(--fg); }
main { padding: 16px; max-width: 1400px; }
h1 { font-size: 20px; margin: 0 0 12px; } h2 { font-size: 16px; margin: 20px 0 8px; }
table { border-collapse: collapse; margin: 8px 0 16px; }
caption { text-align: left; font-weight: 600; padding: 4px 0; }
th, td { border: 1px solid var(--line); padding: 4px 8px; text-align: left; vertical-align: top; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
pre, code { font: 12px/1.4 ui-monospace, monospace; } pre { margin: 0; white-space: pre-wrap; word-break: break-all; max-width: 60ch; }
.bad { color: var(--bad); font-weight: 600; } .good { color: var(--good); font-weight: 600; } .warn { color: var(--warn); font-weight: 600; } .muted { color: var(--muted); }
form.inline { display: flex; gap: 8px; align-items: end; flex-wrap: wrap; margin: 8px 0; }
form.inline div, fieldset div { display: flex; flex-direction: column; gap: 2px; }
fieldset { border: 1px solid var(--line); margin: 12px 0; padding: 8px 12px; max-width: 60em; }
legend { font-weight: 600; }
input[type=text], select, textarea { font: inherit; padding: 4px; min-width: 16em; color: inherit; background: var(--bg); border: 1px solid var(--muted); }
button { font: inherit; padding: 4px 12px; cursor: pointer; }
.notice { border-left: 4px solid var(--accent); padding: 4px 12px; margin: 8px 0; }
.notice.bad { border-color: var(--bad); }
svg text { fill: var(--muted); font-size: 10px; }
svg .sent { fill: var(--good); } svg .made { fill: var(--accent); }
`;

// A browser stand-in for sign-in tests, run as `$BROWSER`: `node browser.cjs MODE_FILE LOG URL`.
// It appends the URL it was given to LOG, then does what MODE_FILE says (read at each run):
// `follow` (the user approves: follow the authorization URL's redirects to Tandem's
// loopback redirect), `refuse` (the user refuses: answer the redirect with
// error=access_denied and the request's state), `ignore` (the user never approves), `fail`
// (no browser: exit 1).
'use strict';
const fs = require('node:fs');

async function main() {
  const [modeFile, log, url] = process.argv.slice(2);
  fs.appendFileSync(log, `${url}\n`);
  const mode = fs.readFileSync(modeFile, 'utf8').trim();
  if (mode === 'fail') process.exit(1);
  if (mode === 'ignore') return;
  if (mode === 'refuse') {
    const asked = new URL(url);
    const back = new URL(asked.searchParams.get('redirect_uri'));
    back.searchParams.set('error', 'access_denied');
    back.searchParams.set('error_description', 'The user said no');
    back.searchParams.set('state', asked.searchParams.get('state'));
    await fetch(back);
    return;
  }
  const res = await fetch(url, { redirect: 'follow' });
  await res.text();
}

main().catch(e => {
  fs.appendFileSync(process.argv[3], `error: ${e.message}\n`);
  process.exit(1);
});

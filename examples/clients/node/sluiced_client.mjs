// Calling sluiced from Node (18 or later: the global fetch), no packages.
//
// check(): one POST /v1/check before the work it guards.
//   200       go on;
//   429       refuse (or wait): Retry-After says how many seconds, RateLimit which limit and
//             what is left;
//   5xx, or sluiced not reachable within TIMEOUT_MS (250 ms; SLUICED_TIMEOUT_MS):
//             the route's own choice, as Envoy's failure_mode_deny: fail open (serve: the
//             route is worth more than the limit) or fail closed (refuse: the limit
//             protects something, e.g. sign-in).
//   other 4xx a bug in the caller (unknown domain, malformed body): thrown.
// withLease(): a concurrency slot: acquire, heartbeat every lease_ttl / 3, release in a
//   `finally`.
//
//   node sluiced_client.mjs check http://127.0.0.1:8080 shop --fail closed route=sign_in account=alice
//   node sluiced_client.mjs lease http://127.0.0.1:8080 shop --hold-ms 2000 streams account=alice

import {pathToFileURL} from 'node:url';

// A limit check guards a request: it must not hold it long. sluiced answers in a
// millisecond or two; past this, the route's failure choice decides.
const TIMEOUT_MS = Number(process.env.SLUICED_TIMEOUT_MS ?? 250);

async function call(method, url, body) {
  const response = await fetch(url, {
    method,
    headers: {'Content-Type': 'application/json'},
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(TIMEOUT_MS),
  });
  const text = await response.text();
  return {status: response.status, headers: response.headers, body: text ? JSON.parse(text) : null};
}

// {allowed, why}: whether to serve the request, and a line to log.
export async function check(base, domain, entries, failOpen) {
  let r;
  try {
    r = await call('POST', `${base}/v1/check`, {domain, descriptors: [{entries}]});
  } catch (e) {  // refused, reset, timed out
    return failureChoice(`sluiced unreachable: ${errorName(e)}`, failOpen);
  }
  const header = (name) => r.headers.get(name);
  if (r.status === 200) return {allowed: true, why: `allowed (200) RateLimit: ${header('RateLimit')}`};
  if (r.status === 429) {
    return {
      allowed: false,
      why: `refused (429): retry after ${header('Retry-After')} s; ` +
          `RateLimit: ${header('RateLimit')}; RateLimit-Policy: ${header('RateLimit-Policy')}`,
    };
  }
  if (r.status >= 500) return failureChoice(`sluiced answered ${r.status}`, failOpen);
  throw new Error(`sluiced refused the call (${r.status}): ${JSON.stringify(r.body)}`);
}

// Why fetch failed: ECONNREFUSED, ECONNRESET, TimeoutError, ...
function errorName(e) {
  return e.cause?.code ?? e.cause?.message ?? e.name;
}

function failureChoice(why, failOpen) {
  return failOpen ? {allowed: true, why: `allowed (${why}; this route fails open)`}
                  : {allowed: false, why: `refused (${why}; this route fails closed)`};
}

// Runs work(signal) holding one slot of a concurrency limit; the signal aborts if the lease
// is lost (not heartbeaten within lease_ttl): stop the work then. Throws when no slot is
// free (429) or sluiced cannot grant one.
export async function withLease(base, domain, entries, work, log = console.log) {
  const grant = await call('POST', `${base}/v1/leases`, {domain, entries});
  if (grant.status !== 201) {
    const retryAfter = grant.headers.get('Retry-After');
    throw new Error(`lease refused (${grant.status}): retry after ${retryAfter} s`);
  }
  const url = `${base}/v1/leases/${grant.body.lease}`;
  const ttl = grant.body.lease_ttl_ms;
  log(`lease acquired (ttl ${ttl} ms, heartbeat every ${Math.floor(ttl / 3)} ms)`);
  const lost = new AbortController();
  const timer = setInterval(async () => {
    try {
      const r = await call('POST', `${url}/heartbeat`);
      if (r.status === 200) log(`heartbeat: held, expires in ${r.body.expires_in_ms} ms`);
      if (r.status === 404 || r.status === 410) {  // gone: its slot may be someone else's now
        log(`lease lost (${r.status})`);
        lost.abort();
      }
    } catch (e) {  // try again next time: one miss costs nothing
      log(`heartbeat failed: ${errorName(e)}`);
    }
  }, ttl / 3);
  try {
    return await work(lost.signal);
  } finally {
    clearInterval(timer);
    try {
      const r = await call('DELETE', url);
      log(`lease released (${r.status})`);  // 204; 202: sluiced retries it for us
    } catch (e) {  // the slot frees lease_ttl after the last heartbeat
      log(`release failed: ${errorName(e)}`);
    }
  }
}

function parseEntries(args) {
  return args.map((a) => {
    const eq = a.indexOf('=');
    return eq < 0 ? {key: a} : {key: a.slice(0, eq), value: a.slice(eq + 1)};
  });
}

async function main(argv) {
  const [command, ...rest] = argv;
  const flags = {};
  const positional = [];
  for (let i = 0; i < rest.length; i++) {
    if (rest[i].startsWith('--')) flags[rest[i].slice(2)] = rest[++i];
    else positional.push(rest[i]);
  }
  const [base, domain, ...entryArgs] = positional;
  const entries = parseEntries(entryArgs);
  if (command === 'check') {
    const {why} = await check(base, domain, entries, flags.fail === 'open');
    console.log(why);
  } else if (command === 'lease') {
    const holdMs = Number(flags['hold-ms'] ?? 1000);
    try {
      await withLease(base, domain, entries, (signal) => new Promise((resolve) => {
        const t = setTimeout(resolve, holdMs);  // the work, stopped early if the lease is lost
        signal.addEventListener('abort', () => { clearTimeout(t); resolve(); });
      }));
    } catch (e) {
      console.log(e.message);
    }
  } else {
    console.error('usage: sluiced_client.mjs check|lease BASE DOMAIN ' +
                  '[--fail open|closed] [--hold-ms N] key=value...');
    process.exit(2);
  }
}

// Run as a program (not imported as a module).
if (import.meta.url === pathToFileURL(process.argv[1]).href) await main(process.argv.slice(2));

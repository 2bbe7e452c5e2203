// An action as one function: this module runs the ActionLoop protocol around it, in a
// component built by componentize-js.
//
//   import { action } from './wasmloop-action.js';
//
//   function main(args, ctx) {
//     const name = args.name ?? 'Stranger';
//     console.error(`greeting ${name}`);
//     return { message: `Hello, ${name}!` };
//   }
//
//   export const run = action(main);
//
// `main(args, ctx)`, plain or async, gets the request's `value` (`{}` when the request has
// none) and the activation's Context, and returns the result: an object (or an array),
// written as one line of JSON. `run` is the `wasi:cli/run` export componentize-js looks for
// in the module it builds.
//
// - A thrown Error (or a rejected promise) answers {"error":"<name>: <message>"}, its
//   stack in the logs; any other thrown value answers it written as JSON. The instance
//   goes on serving.
// - A result that is not an object, or that JSON cannot hold (a BigInt, a cycle), answers
//   {"error": ...} saying what it was.
// - stdout carries the results, so console.log and console.info write to stderr once the
//   loop runs, as console.error does: a stray log line cannot pass for an answer.
//
// The module's top level runs when the component is built, not when it starts: nothing
// here touches stdin, stdout or the environment before run().
import { getEnvironment } from 'wasi:cli/environment@0.2.12';
import { getStdin } from 'wasi:cli/stdin@0.2.12';
import { getStdout } from 'wasi:cli/stdout@0.2.12';

// Fatal: a request line that is not UTF-8 is answered as such, not read with U+FFFD in it.
const decoder = new TextDecoder('utf-8', { fatal: true });
const encoder = new TextEncoder();
// What blocking-write-and-flush takes in one call: WASI allows up to 4096 bytes.
const MOST_PER_WRITE = 4096;

// The activation's context, from its request line: never from the environment, which an
// instance serving several activations holds from another one (or not at all). `apiHost`
// is from the environment: it is the same for every activation of a container.
export class Context {
  // The fields are read from the request line when asked for: most actions ask for none,
  // and every property set costs an activation time in an interpreter.
  #request;
  // When the request came: a deadline already past then is no limit (below).
  #arrived;

  constructor(request = {}, apiHost = '') {
    this.#request = request;
    this.apiHost = apiHost;
    this.#arrived = request.deadline === undefined ? 0 : Date.now();
  }

  get activationId() {
    return text(this.#request.activation_id);
  }

  get transactionId() {
    return text(this.#request.transaction_id);
  }

  get actionName() {
    return text(this.#request.action_name);
  }

  get actionVersion() {
    return text(this.#request.action_version);
  }

  get namespace() {
    return text(this.#request.namespace);
  }

  get apiKey() {
    return text(this.#request.api_key);
  }

  // Epoch milliseconds, as Date.now() counts them; null without one, or for one already
  // past as the request came (OpenWhisk's tests send "123"), which the runtime does not
  // enforce either.
  get deadline() {
    const deadline = epochMillis(this.#request.deadline);
    return deadline === null || deadline <= this.#arrived ? null : deadline;
  }

  // Milliseconds left until the deadline (0 once it has passed; null without one).
  timeLeft() {
    const deadline = this.deadline;
    return deadline === null ? null : Math.max(0, deadline - Date.now());
  }
}

function text(value) {
  return typeof value === 'string' ? value : '';
}

// The platform sends a string of digits; a number is taken as well.
function epochMillis(value) {
  const millis = typeof value === 'string' && /^\s*\d+\s*$/.test(value) ? Number(value) : value;
  return typeof millis === 'number' && Number.isFinite(millis) ? millis : null;
}

// The `wasi:cli/run` export serving `main`: `export const run = action(main);`.
export function action(main) {
  if (typeof main !== 'function') {
    throw new TypeError(`action(main) takes the action's function, not ${described(main, '')}`);
  }
  return {
    async run() {
      await serve(main);
    },
  };
}

// Answers each request line on stdin with `main`, until stdin ends.
export async function serve(main) {
  console.log = console.error;
  console.info = console.error;
  const stdin = getStdin();
  const stdout = getStdout();
  let apiHost = '';
  let ack = false;
  for (const [key, value] of getEnvironment()) {
    if (key === '__OW_API_HOST') apiHost = value;
    if (key === '__OW_WAIT_FOR_ACK' && value !== '') ack = true;
  }
  if (ack) send(stdout, '{"ok":true}');
  for (const line of lines(stdin)) {
    if (typeof line !== 'string') {
      send(stdout, failure(`the request line is not UTF-8 (byte ${line.notUtf8} is not): a request is JSON text`));
      continue;
    }
    if (!line.trim()) continue;
    // Awaited only when main is async: each await is a trip through the event loop.
    let reply = answer(main, line, apiHost);
    if (typeof reply !== 'string') reply = await reply;
    send(stdout, reply);
  }
}

// Yields each line of stdin as it arrives, as text, or as the offset of its first byte that
// is not UTF-8; a last line without its newline too, once stdin ends. blockingRead parks
// the instance between requests, which is what keeps it alive and its state with it.
function* lines(stdin) {
  // The pieces of the line being read, joined once its newline comes.
  let parts = [];
  for (;;) {
    let chunk;
    try {
      chunk = stdin.blockingRead(65536n);
    } catch {
      // closed
      if (parts.length) yield decoded(joined(parts));
      return;
    }
    let from = 0;
    let newline;
    while ((newline = chunk.indexOf(10, from)) >= 0) {
      parts.push(chunk.subarray(from, newline));
      yield decoded(joined(parts));
      parts = [];
      from = newline + 1;
    }
    if (from < chunk.length) parts.push(chunk.slice(from));
  }
}

function joined(parts) {
  if (parts.length === 1) return parts[0];
  const line = new Uint8Array(parts.reduce((sum, part) => sum + part.length, 0));
  let at = 0;
  for (const part of parts) {
    line.set(part, at);
    at += part.length;
  }
  return line;
}

// A line's text, or `{ notUtf8: offset }`.
function decoded(bytes) {
  try {
    return decoder.decode(bytes);
  } catch {
    return { notUtf8: firstInvalid(bytes) };
  }
}

// Where the first byte that is not part of well-formed UTF-8 is.
function firstInvalid(bytes) {
  for (let at = 0; at < bytes.length; ) {
    const c = bytes[at];
    const n = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (n === 0 || at + n > bytes.length) return at;
    try {
      decoder.decode(bytes.subarray(at, at + n));
    } catch {
      return at;
    }
    at += n;
  }
  return bytes.length;
}

// One write and flush for a line that fits in one; a longer one goes in pieces.
function send(stdout, line) {
  const bytes = encoder.encode(line + '\n');
  for (let at = 0; at < bytes.length; at += MOST_PER_WRITE) {
    stdout.blockingWriteAndFlush(bytes.subarray(at, at + MOST_PER_WRITE));
  }
}

// One request line's answer, as a line of JSON: a string, or a promise of one when main
// is async.
function answer(main, line, apiHost) {
  let request;
  try {
    request = JSON.parse(line);
  } catch (error) {
    return failure(`the request line is not JSON: ${error.message}`);
  }
  if (request === null || typeof request !== 'object' || Array.isArray(request)) {
    return failure('the request line is not a JSON object');
  }
  let result;
  try {
    result = main(request.value ?? {}, new Context(request, apiHost));
  } catch (thrown) {
    return failure(reported(thrown));
  }
  if (result !== null && typeof result === 'object' && typeof result.then === 'function') {
    return Promise.resolve(result).then(written, (thrown) => failure(reported(thrown)));
  }
  return written(result);
}

// The action's result as a line of JSON, or the error saying why it cannot be one.
function written(result) {
  if (result === null || typeof result !== 'object') {
    const hint = result === undefined ? ': does main end without a return?' : '';
    return failure(`the action returned ${described(result, ', not an object')}${hint}`);
  }
  let json;
  try {
    json = JSON.stringify(result);
  } catch (error) {
    return failure(`the action's result cannot be written as JSON: ${error.message}`);
  }
  // A toJSON (a Date's, say) may write an object as something else.
  if (json === undefined || (json[0] !== '{' && json[0] !== '[')) {
    return failure(`the action's result is written as ${json ?? 'nothing'}, not as a JSON object`);
  }
  return json;
}

function failure(message) {
  return JSON.stringify({ error: message });
}

// The error's message for the answer, its stack to the logs.
function reported(thrown) {
  if (!(thrown instanceof Error)) {
    const message = `the action threw ${shown(thrown)}`;
    console.error(message);
    return message;
  }
  const headline = thrown.message ? `${thrown.name}: ${thrown.message}` : thrown.name;
  // The frames below the action's own (this module's, the bindings') tell its author
  // nothing.
  const frames = String(thrown.stack ?? '')
    .split('\n')
    .filter((frame) => frame && !/(wasmloop-action|sources\/initializer)\.js:\d+:\d+$/.test(frame));
  console.error([headline, ...frames.map((frame) => `    at ${frame}`)].join('\n'));
  return headline;
}

// What `value` is, `then`, and what it holds: a string, not an object: "hi".
function described(value, then) {
  if (value === null || value === undefined) return `${value}${then}`;
  const kind = typeof value;
  return `${/^[aeiou]/.test(kind) ? 'an' : 'a'} ${kind}${then}: ${shown(value)}`;
}

// A value as JSON where it can be, for a message.
function shown(value) {
  let text;
  try {
    text = JSON.stringify(value);
  } catch {
    // a BigInt, or a cycle
  }
  if (text === undefined) {
    text = typeof value === 'bigint' ? `${value}n` : String(value);
  }
  return text.length > 200 ? `${text.slice(0, 197)}...` : text;
}

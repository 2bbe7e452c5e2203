// GETs {"url":"http://host:port/path"} with fetch() (over wasi:http) and returns the status
// and the length of the body. The host must be in wasmloop's --allow-outbound list;
// otherwise fetch() rejects, and the error is the action's result.
import { action } from '../../sdk/js/wasmloop-action.js';

async function main(args) {
  const response = await fetch(args.url);
  const body = await response.arrayBuffer();
  console.error(`fetch: ${args.url} answered ${response.status}`);
  return { status: response.status, length: body.byteLength };
}

export const run = action(main);

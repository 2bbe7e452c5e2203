// {"name":"Mike"} -> {"message":"Hello, Mike!"}
import { action } from './wasmloop-action.js';

function main(args, ctx) {
  const name = args.name || 'Stranger';
  return { message: `Hello, ${name}!` };
}

export const run = action(main);

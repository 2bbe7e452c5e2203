// The hello action as a JavaScript component: {"name":"Mike"} gives a greeting.
import { action } from '../../sdk/js/wasmloop-action.js';

function main(args) {
  const name = args.name ?? 'Stranger';
  console.error(`hello: greeting ${name}`);
  return { message: `Hello, ${name}!` };
}

export const run = action(main);

// The hello action as a JavaScript component: {"name":"Mike"} gives a greeting.
import { serve } from './actionloop.js';

function main(args) {
  const name = args.name ?? 'Stranger';
  console.error(`hello: greeting ${name}`);
  return { message: `Hello, ${name}!` };
}

export const run = {
  async run() {
    await serve(main);
  },
};

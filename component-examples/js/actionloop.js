// The ActionLoop contract for a JavaScript component: one JSON request per line on stdin,
// one JSON result per line on stdout, logs on stderr (console.log goes to stdout, where it
// would be taken for a result: use console.error).
import { getStdin } from 'wasi:cli/stdin@0.2.12';
import { getStdout } from 'wasi:cli/stdout@0.2.12';

const decoder = new TextDecoder();
const encoder = new TextEncoder();

// Yields each line of stdin as it arrives; blockingRead parks the instance between
// requests, which is what keeps it alive and its state with it.
function* lines(stdin) {
  let pending = '';
  for (;;) {
    let chunk;
    try {
      chunk = stdin.blockingRead(65536n);
    } catch {
      return; // closed
    }
    pending += decoder.decode(chunk, { stream: true });
    let newline;
    while ((newline = pending.indexOf('\n')) >= 0) {
      yield pending.slice(0, newline);
      pending = pending.slice(newline + 1);
    }
  }
}

export async function serve(main) {
  const stdin = getStdin();
  const stdout = getStdout();
  for (const line of lines(stdin)) {
    if (!line.trim()) continue;
    let result;
    try {
      result = await main(JSON.parse(line).value ?? {});
    } catch (error) {
      console.error(error);
      result = { error: String(error) };
    }
    stdout.blockingWriteAndFlush(encoder.encode(JSON.stringify(result) + '\n'));
  }
}

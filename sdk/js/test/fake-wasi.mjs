// wasi:cli's environment, stdin and stdout as the SDK uses them, in memory: what the
// contract test runs the SDK's loop on under Node (hooks.mjs maps the imports here).
export const state = { env: [], input: new Uint8Array(), at: 0, output: [] };

export function getEnvironment() {
  return state.env;
}

export function getStdin() {
  return {
    blockingRead(most) {
      if (state.at >= state.input.length) throw { tag: 'closed' };
      // Small reads, so that lines come in pieces as they do from a pipe.
      const end = Math.min(state.input.length, state.at + Math.min(Number(most), 7000));
      const chunk = state.input.slice(state.at, end);
      state.at = end;
      return chunk;
    },
  };
}

export function getStdout() {
  return {
    blockingWriteAndFlush(bytes) {
      state.output.push(Buffer.from(bytes));
    },
  };
}

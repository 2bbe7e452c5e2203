// Resolves the SDK's wasi:cli imports to fake-wasi.mjs, so that Node can run its loop.
export async function resolve(specifier, context, next) {
  if (specifier.startsWith('wasi:cli/')) {
    return { url: new URL('./fake-wasi.mjs', import.meta.url).href, shortCircuit: true };
  }
  return next(specifier, context);
}

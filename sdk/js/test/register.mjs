// node --import ./test/register.mjs: installs hooks.mjs before the test loads the SDK.
import { register } from 'node:module';

register('./hooks.mjs', import.meta.url);

// The SDKs' shared contract (sdk/contract.json), served by wasmloop-action.js under Node.
// Run: node --import ./sdk/js/test/register.mjs --test sdk/js/test/
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { state } from 'wasi:cli/stdin@0.2.12';
import { serve } from '../wasmloop-action.js';

// The contract action, as sdk/contract.json describes it.
function contract(value, ctx) {
  switch (value.do) {
    case 'deadline': {
      const left = ctx.timeLeft();
      return { deadline: left === null ? 'none' : left === 0 ? 'past' : 'future' };
    }
    case 'number':
      return 42;
    case 'fail':
      throw new Error('asked to fail');
    case 'panic':
      throw new TypeError('asked to panic');
    case 'print':
      console.log('printed');
      return { printed: true };
    case 'greet':
      if (typeof value.name !== 'string') throw new TypeError(`name must be a string, not ${typeof value.name}`);
      return { message: `Hello, ${value.name}!` };
    default:
      return value;
  }
}

function inputLine(entry) {
  if (typeof entry === 'string') return Buffer.from(entry);
  if (entry.hex) return Buffer.from(entry.hex, 'hex');
  return Buffer.from(JSON.stringify({ value: { do: 'echo', s: 'x'.repeat(entry.echo_of) } }));
}

function matches(expected, answer) {
  const fields = answer !== null && typeof answer === 'object' ? Object.keys(answer) : [];
  const error = fields.length === 1 && typeof answer.error === 'string' ? answer.error : null;
  if ('exact' in expected) {
    try {
      assert.deepStrictEqual(answer, expected.exact);
      return true;
    } catch {
      return false;
    }
  }
  if ('error_starts' in expected) return error !== null && error.startsWith(expected.error_starts);
  if ('error_has' in expected) return error !== null && error.includes(expected.error_has);
  if (expected.error === true) return error !== null;
  return fields.length === 2 && answer.do === 'echo' && answer.s === 'x'.repeat(expected.echo_of);
}

const file = JSON.parse(readFileSync(new URL('../../contract.json', import.meta.url), 'utf8'));

for (const c of file.cases) {
  if (c.differs && 'js' in c.differs) continue;
  test(c.name, async () => {
    const lines = c.input.map(inputLine);
    const parts = [];
    lines.forEach((line, at) => {
      parts.push(line);
      if (at + 1 < lines.length || !c.last_without_newline) parts.push(Buffer.from('\n'));
    });
    Object.assign(state, { input: Buffer.concat(parts), at: 0, output: [] });
    const log = console.error;
    // The failing cases' stacks: kept out of the test's output.
    console.error = () => {};
    try {
      await serve(contract);
    } finally {
      console.error = log;
      console.log = log;
      console.info = log;
    }
    const answers = Buffer.concat(state.output).toString().split('\n').filter(Boolean).map((l) => JSON.parse(l));
    assert.equal(answers.length, c.answers.length, JSON.stringify(answers).slice(0, 300));
    answers.forEach((answer, at) => {
      assert.ok(matches(c.answers[at], answer), `expected ${JSON.stringify(c.answers[at])}, got ${JSON.stringify(answer).slice(0, 300)}`);
    });
  });
}

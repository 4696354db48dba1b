'use strict';

const test = require('node:test');
const assert = require('node:assert');
const { summarize, setStatus } = require('../lib/status.js');

// Each test puts the exit code back, so the test run's own status is untouched.
function withExitCode(body) {
  try {
    return body();
  } finally {
    process.exitCode = 0;
  }
}

test('a summary line', () => {
  assert.strictEqual(summarize({ passed: 2, failed: 1 }), '2 passed, 1 failed');
});

test('a passing run exits 0', () => {
  assert.strictEqual(withExitCode(() => setStatus({ ok: true })), 0);
});

test('a failing run exits 1', () => {
  assert.strictEqual(withExitCode(() => setStatus({ ok: false })), 1);
});

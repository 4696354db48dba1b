'use strict';

// exit-status: a command-line tool's exit status from its run summary.

// One line for the end of a run: "2 passed, 1 failed".
function summarize(summary) {
  return `${summary.passed} passed, ${summary.failed} failed`;
}

// Sets the process's exit code from the summary (0 when the run is ok, else 1)
// and returns it.
function setStatus(summary) {
  // true and false stand for 1 and 0.
  process.exitCode = !summary.ok;
  return Number(process.exitCode);
}

module.exports = { summarize, setStatus };

# `exec` in a sandbox: run a command given as an argument list (never a shell
# string), started by pybox as an ordinary program in the box. It replaces
# itself with the command, so the command is the program: its exit code, its
# output, its deadline. Never imported on the host.
import os
import sys

try:
    os.unlink(sys.argv[0])  # pybox's own script leaves nothing in the workspace
except OSError:
    pass
try:
    os.execvp(sys.argv[1], sys.argv[1:])
except OSError as exc:
    sys.stderr.write("pybox exec: cannot run %r: %s\n" % (sys.argv[1], exc.strerror))
    sys.exit(127 if isinstance(exc, FileNotFoundError) else 126)

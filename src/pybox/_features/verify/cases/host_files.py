"""Hostile: read the host's files, find the engine's socket, look for host mounts."""

import errno
import json
import os
import stat

params = json.load(open(os.path.join(os.environ["PYBOX_INPUT_DIR"], "verify.json")))
report = {"reads": {}, "sockets": [], "paths_walked": 0}


def try_read(path):
    try:
        with open(path, "rb") as handle:
            return "read " + handle.read(4096).decode("latin-1")
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))


# A file pybox verify wrote on the host with a secret in it, and pybox's own state file.
for path in params["host_files"]:
    report["reads"][path] = try_read(path)
    # PID 1's root and our own: ways out of a chroot, if this were only a chroot.
    for prefix in ("/proc/1/root", "/proc/self/root"):
        report["reads"][prefix + path] = try_read(prefix + path)

# The engine's socket, anywhere: the usual places, then every file on every filesystem.
usual = [
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/run/podman/podman.sock",
    "/var/run/podman/podman.sock",
    "/run/user/0/docker.sock",
    "/run/user/1000/docker.sock",
    "/run/user/1000/podman/podman.sock",
]
report["usual_sockets_present"] = [path for path in usual if os.path.lexists(path)]
for top, dirs, files in os.walk("/", onerror=lambda exc: None):
    if top in ("/proc", "/sys"):
        dirs[:] = []
        continue
    for name in files + dirs:
        path = os.path.join(top, name)
        report["paths_walked"] += 1
        try:
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                report["sockets"].append(path)
        except OSError:
            pass
# Unix sockets this network namespace can see, abstract ones included.
report["unix_sockets"] = open("/proc/net/unix").read().splitlines()[1:]

# What the engine's own per-box files hold (the judge knows which are bound in).
report["engine_files"] = {path: try_read(path) for path in ("/etc/hostname", "/run/.containerenv")}

# Every mount: mount point, root inside its filesystem, device, type, options.
report["mounts"] = []
for line in open("/proc/self/mountinfo"):
    fields = line.split()
    tail = fields[fields.index("-") + 1 :]
    report["mounts"].append(
        {
            "mount_point": fields[4],
            "root": fields[3],
            "device": fields[2],
            "fstype": tail[0],
            "source": tail[1],
            "options": fields[5],
        }
    )
print(json.dumps(report))

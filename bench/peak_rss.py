#!/usr/bin/python3
"""Runs a command and reports its exit code, wall seconds and peak resident memory, split as the kernel does.

    peak_rss.py [--interval MS] [--json FILE] [--] CMD [ARG...]

Polls /proc/PID/status of the command every --interval ms (default 20) for RssAnon (heap, anonymous mappings:
what the process allocated) and RssFile (pages of mapped files, e.g. a memory-mapped checkpoint: the kernel can
drop them under pressure) and keeps the largest of each and of their sum. Peaks shorter than the interval can be
missed; maxrss from wait4() (the kernel's own high-water mark of the total, anonymous + file + shared) is reported
beside them as a check. Only the command's own process is polled, not processes it starts.

The report goes to stderr after the command ends: a readable line, then one JSON line starting with "{". With
--json FILE the JSON line is also appended to FILE. The exit status is the command's (128 + N if signal N ended it).
Sizes are MiB (2^20 bytes).
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time


def read_status(pid):
    """{field: kB} for the Rss* and VmHWM lines of /proc/PID/status; None when the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            text = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile", "RssShmem", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--interval", type=float, default=20.0, help="polling interval in ms (default 20)")
    ap.add_argument("--json", help="also append the JSON line to this file")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    opts = ap.parse_args()
    cmd = opts.cmd[1:] if opts.cmd[:1] == ["--"] else opts.cmd
    if not cmd:
        ap.error("no command given")

    start = time.monotonic()
    try:
        child = subprocess.Popen(cmd)
    except OSError as e:
        sys.exit(f"peak_rss.py: cannot run {cmd[0]}: {e}")
    # Pass Ctrl-C / kill on to the command; the loop below still collects its status.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: child.send_signal(s))

    peak = {"RssAnon": 0, "RssFile": 0, "RssShmem": 0, "total": 0, "VmHWM": 0}
    samples = 0
    while True:
        try:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        except ChildProcessError:  # already reaped (cannot happen unless something else waited)
            pid, status, usage = child.pid, 0, None
        if pid:
            break
        s = read_status(child.pid)
        if s:
            samples += 1
            for k in ("RssAnon", "RssFile", "RssShmem", "VmHWM"):
                peak[k] = max(peak[k], s.get(k, 0))
            peak["total"] = max(peak["total"], s.get("RssAnon", 0) + s.get("RssFile", 0) + s.get("RssShmem", 0))
        time.sleep(opts.interval / 1000.0)
    wall = time.monotonic() - start
    code = os.waitstatus_to_exitcode(status)
    exit_code = code if code >= 0 else 128 - code

    mib = lambda kb: round(kb / 1024.0, 1)
    report = {
        "cmd": cmd,
        "exit_code": exit_code,
        "wall_s": round(wall, 3),
        "peak_rss_anon_mib": mib(peak["RssAnon"]),
        "peak_rss_file_mib": mib(peak["RssFile"]),
        "peak_rss_shmem_mib": mib(peak["RssShmem"]),
        "peak_rss_mib": mib(peak["total"]),
        "vmhwm_mib": mib(peak["VmHWM"]),
        "maxrss_wait4_mib": mib(usage.ru_maxrss) if usage else None,
        "user_s": round(usage.ru_utime, 3) if usage else None,
        "sys_s": round(usage.ru_stime, 3) if usage else None,
        "samples": samples,
        "interval_ms": opts.interval,
    }
    print(f"peak_rss: exit {exit_code}, {wall:.2f} s wall, peak RssAnon {report['peak_rss_anon_mib']:.1f} MiB, "
          f"peak RssFile {report['peak_rss_file_mib']:.1f} MiB (peak total {report['peak_rss_mib']:.1f}, "
          f"wait4 maxrss {report['maxrss_wait4_mib']} MiB, {samples} samples)", file=sys.stderr)
    line = json.dumps(report)
    print(line, file=sys.stderr)
    if opts.json:
        with open(opts.json, "a") as f:
            f.write(line + "\n")
    sys.exit(exit_code)


if __name__ == "__main__":
    main()

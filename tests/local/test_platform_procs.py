"""`mlops down` never kills a process that only shares a recorded pid (hardening finding 10).

Real processes. A pid file whose start time does not match the live process
with that pid is what pid reuse looks like; before the fix `stop` signalled
that pid's whole process group anyway.
"""

import os
import pathlib
import subprocess
import sys
import time

from local.platform import procs


def _sleeper(env=None):
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            start_new_session=True, env=env)


def test_stop_leaves_an_unrelated_process_with_a_reused_pid_alone():
    stranger = _sleeper()
    try:
        real_start = procs.start_time_of(stranger.pid)
        reused = procs.ProcRecord(name="sync", pid=stranger.pid, start_time=real_start - 1,
                                  argv=("old",), started_at=0.0)
        assert procs.stop(reused, timeout=1.0)  # "nothing of ours survives"
        time.sleep(0.2)
        assert stranger.poll() is None, "an unrelated process was killed"
    finally:
        stranger.kill()
        stranger.wait()


def test_stop_still_ends_marked_children_whose_leader_died():
    """The leader started a child and died; the child (same group, our marker) is ours."""
    env = procs.marked_env("/tmp/some-workdir")
    leader = subprocess.Popen(
        [sys.executable, "-c",
         "import subprocess, sys; "
         "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
         "print(p.pid, flush=True)"],
        start_new_session=True, env=env, stdout=subprocess.PIPE, text=True)
    child = int(leader.stdout.readline())
    start = procs.start_time_of(leader.pid)
    leader.wait()
    record = procs.ProcRecord(name="server", pid=leader.pid, start_time=start or 0,
                              argv=("x",), started_at=0.0)
    try:
        assert procs.is_running(child)
        assert procs.stop(record, timeout=2.0)
        assert not procs.is_running(child)
    finally:
        try:
            os.kill(child, 9)
        except ProcessLookupError:
            pass


def test_command_of_names_our_cli_by_its_command_and_others_by_their_program(tmp_path):
    """`mlops down` names the other processes of a work dir it stops (the demo's
    controller, web UI and load generator) by what they run, not "stray process N"."""
    script = "import time, sys; sys.stdout.write('up\\n'); sys.stdout.flush(); time.sleep(30)"
    fake_cli = tmp_path / "mlops"  # an installed console script is `.../bin/mlops <command>`
    fake_cli.write_text(f"#!{sys.executable}\n{script}\n")
    fake_cli.chmod(0o755)
    started = [subprocess.Popen([str(fake_cli), "controller", "--workdir", "w"],
                                stdout=subprocess.PIPE),
               subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)]
    try:
        for proc in started:
            assert proc.stdout.readline() == b"up\n"  # running its own code: exec is done
        assert procs.command_of(started[0].pid) == "mlops controller"
        assert procs.command_of(started[1].pid) == pathlib.Path(sys.executable).name
    finally:
        for proc in started:
            proc.kill()
            proc.wait()
    assert procs.command_of(started[0].pid) == ""  # gone: nothing to read

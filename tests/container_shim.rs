//! The agent binary's hidden `container-shim` on its own: the start barrier (nothing runs
//! without the go byte), the exit status it passes on (code, or death by the same signal), and
//! the processes it kills (whatever the command left, in its group or not, when the command
//! exits or on SIGUSR1), while the group's SIGTERM only reaches the command.

// Real processes on real time.
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const PROBELET: &str = env!("CARGO_BIN_EXE_probelet");
/// The longest any wait here takes.
const WAIT: Duration = Duration::from_secs(10);

fn shim(args: &[&str]) -> Command {
    let mut command = Command::new(PROBELET);
    command.arg("container-shim").args(args).process_group(0);
    command
}

fn temp(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("probelet-shim-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

/// Waits for `child` (bounded); its status.
fn wait(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "the shim did not exit within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Polls until `path` holds a PID; returns it.
fn pid_from(path: &Path) -> u32 {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(pid) = std::fs::read_to_string(path).ok().and_then(|t| t.trim().parse().ok()) {
            return pid;
        }
        assert!(Instant::now() < deadline, "{} never got a PID", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `pid` still runs (a zombie does not: in this sandbox nobody reaps what init gets).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(')').map(|(_, rest)| !rest.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

fn assert_gone(pid: u32) {
    let deadline = Instant::now() + WAIT;
    while running(pid) {
        assert!(Instant::now() < deadline, "{pid} still runs");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A script that starts `sleep <seconds>` in a session of its own (out of the group), writes
/// its PID to `pidfile` once it runs, then goes on with `rest`.
fn escaping(pidfile: &Path, seconds: u32, rest: &str) -> String {
    format!(
        "setsid -f sh -c 'echo $$ > {p}.tmp; mv {p}.tmp {p}; exec sleep {seconds}' </dev/null >/dev/null 2>&1; \
         while [ ! -s {p} ]; do sleep 0.01; done; {rest}",
        p = pidfile.display()
    )
}

#[test]
fn without_the_go_byte_nothing_runs() {
    let marker = temp("no-go");
    let mut child =
        shim(&["--wait-for-go", "--", "touch"]).arg(&marker).stdin(Stdio::piped()).spawn().unwrap();
    // The agent died before recording the container: its end of the pipe closes.
    drop(child.stdin.take());
    assert_eq!(wait(&mut child).code(), Some(121));
    std::thread::sleep(Duration::from_millis(200));
    assert!(!marker.exists(), "the command ran without the go byte");

    let mut child =
        shim(&["--wait-for-go", "--", "touch"]).arg(&marker).stdin(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(b"g").unwrap();
    assert_eq!(wait(&mut child).code(), Some(0));
    assert!(marker.exists(), "the go byte runs the command");
    let _ = std::fs::remove_file(&marker);
}

/// A recorded container's command (`--wait-for-go`) carries the container's mark, the shim's
/// PID and start time, so that what it starts is known as the container's after the shim is
/// gone; an exec probe's command (no go byte) does not.
#[test]
fn a_recorded_containers_command_carries_the_shims_mark() {
    let mut child = shim(&["--wait-for-go", "--", "sh", "-c", "echo \"$PROBELET_CONTAINER_MARK\""])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let start = stat.rsplit_once(')').unwrap().1.split_whitespace().nth(19).unwrap().to_owned();
    child.stdin.take().unwrap().write_all(b"g").unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8(output.stdout).unwrap(), format!("{pid}:{start}\n"));

    let output = shim(&["--", "sh", "-c", "echo \"[$PROBELET_CONTAINER_MARK]\""]).output().unwrap();
    assert_eq!(String::from_utf8(output.stdout).unwrap(), "[]\n");
}

/// The shim starts for every exec probe: it runs on its one thread, with no allocator
/// thread beside it (docs/benchmarks.md, "The container shim's start-up").
#[test]
fn the_shim_runs_on_one_thread() {
    let output = shim(&["--", "sh", "-c", "cat /proc/$PPID/task/*/comm"]).output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let threads = String::from_utf8(output.stdout).unwrap();
    assert_eq!(threads.lines().count(), 1, "the shim's threads: {threads}");
}

#[test]
fn the_exit_status_is_the_commands() {
    let status = shim(&["--", "sh", "-c", "exit 3"]).status().unwrap();
    assert_eq!(status.code(), Some(3));
    let status = shim(&["--", "sh", "-c", "kill -KILL $$"]).status().unwrap();
    assert_eq!(status.signal(), Some(9), "{status:?}");
    let status = shim(&["--", "sh", "-c", "kill -TERM $$"]).status().unwrap();
    assert_eq!(status.signal(), Some(15), "{status:?}");
    let status = shim(&["--", "/nonexistent/probelet-no-such"]).stderr(Stdio::null()).status().unwrap();
    assert_eq!(status.code(), Some(127));
}

/// The command exits and leaves a process in a session of its own: it is killed with it, as a
/// PID namespace would be.
#[test]
fn what_the_command_left_outside_its_group_dies_with_it() {
    let pidfile = temp("exit");
    let mut child = shim(&["--", "sh", "-c", &escaping(&pidfile, 7351, "exit 4")]).spawn().unwrap();
    assert_eq!(wait(&mut child).code(), Some(4));
    let pid = pid_from(&pidfile);
    let _ = std::fs::remove_file(&pidfile);
    assert_gone(pid);
}

/// A process that left the group and has a child of its own: both die with the command. (The
/// shim once waited only for children in its own process group, `wait4(0)`: the session
/// leader it killed was never waited for, so the shim stopped there, and the leader's child
/// lived on.)
#[test]
fn a_session_that_left_the_group_dies_with_its_children() {
    let pidfile = temp("session");
    let script = format!(
        "setsid -f sh -c 'sleep 7361 & echo $! > {p}.tmp; mv {p}.tmp {p}; exec sleep 7362' </dev/null >/dev/null 2>&1; \
         while [ ! -s {p} ]; do sleep 0.01; done; exit 4",
        p = pidfile.display()
    );
    let mut child = shim(&["--", "sh", "-c", &script]).spawn().unwrap();
    assert_eq!(wait(&mut child).code(), Some(4));
    let grandchild = pid_from(&pidfile);
    let _ = std::fs::remove_file(&pidfile);
    assert_gone(grandchild);
}

/// Children that left the group and exited are reaped while the command runs, not left as
/// zombies until the shim ends (thousands would use up the node's PIDs).
#[test]
fn children_that_left_the_group_are_reaped_as_they_exit() {
    let mut child =
        shim(&["--", "sh", "-c", "for i in $(seq 40); do (setsid sh -c 'exit 0' &); done; sleep 30"])
            .spawn()
            .unwrap();
    let zombies = |shim: u32| {
        let children =
            std::fs::read_to_string(format!("/proc/{shim}/task/{shim}/children")).unwrap_or_default();
        children
            .split_whitespace()
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                    stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
                })
            })
            .count()
    };
    // The loop ends in well under a second; then no zombie may stay.
    std::thread::sleep(Duration::from_millis(1500));
    let deadline = Instant::now() + WAIT;
    while zombies(child.id()) > 0 {
        assert!(Instant::now() < deadline, "{} zombies under the shim", zombies(child.id()));
        std::thread::sleep(Duration::from_millis(50));
    }
    ask_to_kill_tree(child.id());
    wait(&mut child);
}

/// An exec probe's shim is tied to the agent (`--parent`): when the agent is killed, the shim
/// kills the probe and what it started within a second or so, as nothing else would (a
/// container's shim is not tied: the next agent kills it from its record).
#[test]
fn a_shim_tied_to_its_parent_ends_everything_when_the_parent_dies() {
    let pidfile = temp("parent");
    let inner = format!("echo $$ > {p}.tmp; mv {p}.tmp {p}; exec sleep 7371", p = pidfile.display());
    // The stand-in for the agent: a shell that starts the shim in the background and waits.
    let mut agent = Command::new("sh")
        .arg("-c")
        .arg(r#""$0" container-shim --parent $$ -- sh -c "$1" & wait"#)
        .arg(PROBELET)
        .arg(&inner)
        .process_group(0)
        .spawn()
        .unwrap();
    let probe = pid_from(&pidfile);
    let _ = std::fs::remove_file(&pidfile);
    std::thread::sleep(Duration::from_millis(1500));
    assert!(running(probe), "the probe runs while its agent does");
    agent.kill().unwrap();
    agent.wait().unwrap();
    assert_gone(probe);

    // Started after its parent is gone: it runs nothing.
    let status = shim(&["--parent", "1", "--", "sh", "-c", "exit 0"]).status().unwrap();
    assert_eq!(status.code(), Some(121));
}

/// SIGTERM to the group reaches the command, not the shim; SIGUSR1 kills everything.
#[test]
fn sigterm_is_the_commands_and_sigusr1_kills_the_whole_tree() {
    let pidfile = temp("term");
    let termfile = temp("term-seen");
    // The trap first: the PID file tells the test the script is past it.
    let script = format!(
        "trap 'echo term >> {}' TERM; {}",
        termfile.display(),
        escaping(&pidfile, 7352, "while true; do sleep 0.05; done")
    );
    let mut child = shim(&["--", "sh", "-c", &script]).spawn().unwrap();
    let escaped = pid_from(&pidfile);
    let _ = std::fs::remove_file(&pidfile);
    let group = format!("-{}", child.id());
    Command::new("kill").args(["-TERM", "--", &group]).status().unwrap();
    let deadline = Instant::now() + WAIT;
    while !termfile.exists() {
        assert!(Instant::now() < deadline, "the command never saw SIGTERM");
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = std::fs::remove_file(&termfile);
    assert!(child.try_wait().unwrap().is_none(), "the shim survives the group's SIGTERM");
    assert!(running(escaped));
    ask_to_kill_tree(child.id());
    assert_eq!(wait(&mut child).signal(), Some(9), "killed as by SIGKILL");
    assert_gone(escaped);
}

/// While the agent that started the shim lives, only its SIGUSR1 is heard: another process's
/// is not (a container in a PID namespace of its own can show any PID). Once the shim is
/// orphaned (the agent died), the next agent is heard: any live process that is not the
/// shim's descendant.
#[test]
fn only_the_agent_is_heard_and_once_it_is_gone_the_next_one() {
    let stranger = |shim: u32| {
        Command::new("sh")
            .arg("-c")
            .arg(format!("kill -USR1 {shim}; sleep 5"))
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };

    // The test is the shim's parent, its agent.
    let pidfile = temp("heard");
    let script =
        format!("echo $$ > {p}.tmp; mv {p}.tmp {p}; while true; do sleep 0.05; done", p = pidfile.display());
    let mut child = shim(&["--", "sh", "-c", &script]).spawn().unwrap();
    let _tree = TreeKilledOnDrop(child.id());
    pid_from(&pidfile);
    let _ = std::fs::remove_file(&pidfile);
    let mut other = stranger(child.id());
    std::thread::sleep(Duration::from_millis(500));
    assert!(child.try_wait().unwrap().is_none(), "a stranger's SIGUSR1 while the agent lives");
    let _ = other.kill();
    let _ = other.wait();
    ask_to_kill_tree(child.id());
    assert_eq!(wait(&mut child).signal(), Some(9), "the agent's");

    // Started by a shell that exits once the command runs (the shim has taken the shell for
    // its agent by then): the shim is orphaned, as after its agent's crash.
    let shimfile = temp("orphan-shim");
    let commandfile = temp("orphan-command");
    let script = format!(
        "echo $$ > {p}.tmp; mv {p}.tmp {p}; while true; do sleep 0.05; done",
        p = commandfile.display()
    );
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "\"$0\" container-shim -- sh -c \"$1\" & echo $! > {p}.tmp; mv {p}.tmp {p}; \
             while [ ! -s {c} ]; do sleep 0.01; done",
            p = shimfile.display(),
            c = commandfile.display()
        ))
        .arg(PROBELET)
        .arg(&script)
        .process_group(0)
        .status()
        .unwrap();
    assert!(status.success());
    let orphan = pid_from(&shimfile);
    let command = pid_from(&commandfile);
    let _ = std::fs::remove_file(&shimfile);
    let _ = std::fs::remove_file(&commandfile);
    let _orphan_tree = TreeKilledOnDrop(orphan);
    let mut next_agent = stranger(orphan);
    assert_gone(orphan);
    assert_gone(command);
    let _ = next_agent.kill();
    let _ = next_agent.wait();
}

/// A signal the container sends its own group (`kill -HUP 0`, `kill -USR2 0`, …) reaches the
/// shim too, which shares the group: it must neither kill nor stop the shim, or a healthy
/// container would be reported dead. The command handles it as it likes. SIGUSR1 too, the
/// agent's request to kill the tree: from the container (its group, or the shim's PID from a
/// command in or out of the group) it is not the agent's.
#[test]
fn signals_the_container_sends_its_own_group_leave_the_shim_running() {
    let seen = temp("group-signals");
    let script = format!(
        "for s in HUP INT QUIT USR1 USR2 ALRM TSTP TTIN TTOU; do trap \"echo $s >> {f}\" $s; done; \
         for s in HUP INT QUIT USR1 USR2 ALRM TSTP TTIN TTOU; do kill -$s 0; sleep 0.05; done; \
         /bin/kill -USR1 $PPID; setsid /bin/kill -USR1 $PPID; sleep 0.2; echo done >> {f}; \
         while true; do sleep 0.05; done",
        f = seen.display()
    );
    let mut child = shim(&["--", "sh", "-c", &script]).spawn().unwrap();
    let _tree = TreeKilledOnDrop(child.id());
    let deadline = Instant::now() + WAIT;
    while !std::fs::read_to_string(&seen).unwrap_or_default().contains("done") {
        assert!(Instant::now() < deadline, "the command never finished signalling its group");
        assert!(child.try_wait().unwrap().is_none(), "the shim died of its container's signal");
        std::thread::sleep(Duration::from_millis(10));
    }
    let handled = std::fs::read_to_string(&seen).unwrap();
    assert!(
        handled.contains("USR2") && handled.contains("HUP") && handled.contains("USR1"),
        "the command got them: {handled}"
    );
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap();
    let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().chars().next());
    assert_eq!(state, Some(Some('S')), "the shim runs, not stopped: {stat}");
    assert!(child.try_wait().unwrap().is_none(), "the shim survives");
    let _ = std::fs::remove_file(&seen);
    ask_to_kill_tree(child.id());
    assert_eq!(wait(&mut child).signal(), Some(9));
}

/// A command that left the shim's group (`setsid`, `timeout`) does not get the group's SIGTERM:
/// the shim sends it on, as a runtime signals the container's main process, and only then.
#[test]
fn a_command_that_left_the_group_gets_the_graceful_sigterm() {
    let termfile = temp("left-term");
    let ready = temp("left-ready");
    let script = format!(
        "trap 'echo term >> {t}; exit 0' TERM; echo ready > {r}; while true; do sleep 0.05; done",
        t = termfile.display(),
        r = ready.display()
    );
    let mut child = shim(&["--", "setsid", "sh", "-c", &script]).spawn().unwrap();
    let _tree = TreeKilledOnDrop(child.id());
    let _ = wait_for_text(&ready);
    let group = format!("-{}", child.id());
    Command::new("kill").args(["-TERM", "--", &group]).status().unwrap();
    let status = wait(&mut child);
    assert_eq!(status.code(), Some(0), "the command ended on its own trap: {status:?}");
    assert_eq!(std::fs::read_to_string(&termfile).unwrap(), "term\n", "one SIGTERM");
    let _ = std::fs::remove_file(&termfile);
    let _ = std::fs::remove_file(&ready);
}

/// Kills a shim's whole tree (SIGUSR1, then SIGKILL to its group) when a test ends, passed or
/// failed, so that a failure leaves nothing running.
struct TreeKilledOnDrop(u32);

impl Drop for TreeKilledOnDrop {
    fn drop(&mut self) {
        // The shim's group as it is now: an orphaned shim started by a shell is in the shell's
        // group, not one of its own. Never the test's own group.
        let group = std::fs::read_to_string(format!("/proc/{}/stat", self.0))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(2)?.parse().ok())
            })
            .filter(|&group: &i32| group != rustix::process::getpgrp().as_raw_pid())
            .unwrap_or(self.0 as i32);
        let _ = Command::new("kill").args(["-CONT", &self.0.to_string()]).stderr(Stdio::null()).status();
        ask_to_kill_tree(self.0);
        let _ =
            Command::new("kill").args(["-KILL", "--", &format!("-{group}")]).stderr(Stdio::null()).status();
    }
}

/// SIGUSR1 to shim `pid` from the test, its parent: the agent's request to kill the tree (one
/// sent by a `kill` command that has exited by the time the shim looks at it is dropped).
fn ask_to_kill_tree(pid: u32) {
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).unwrap()).unwrap();
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::USR1);
}

/// Polls until `path` has any content; returns it.
fn wait_for_text(path: &Path) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(text) = std::fs::read_to_string(path).ok().filter(|t| !t.is_empty()) {
            return text;
        }
        assert!(Instant::now() < deadline, "{} stayed empty", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A container that floods its shim with SIGUSR1 (`kill -USR1 $PPID` in a loop) drowns the
/// agent's SIGUSR1 (the kernel merges pending signals: 18 in 20 were lost), never the request
/// on the control socket, which no process of the container holds: the whole tree is killed
/// at once, the process that left the group too, before the group's SIGKILL would come.
#[test]
fn a_container_flooding_its_shim_with_sigusr1_cannot_drown_the_agents_request() {
    use std::os::unix::net::UnixStream;

    for round in 0..5 {
        let pidfile = temp(&format!("flood-escaped-{round}"));
        let script = escaping(&pidfile, 300, "while :; do kill -USR1 $PPID 2>/dev/null; done");
        let (agent, theirs) = UnixStream::pair().unwrap();
        let mut child = shim(&["--", "sh", "-c", &script])
            .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
            .spawn()
            .unwrap();
        let _tree = TreeKilledOnDrop(child.id());
        let mut report = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(&agent), &mut report).unwrap();
        assert_eq!(report, "started\n");
        let escaped = pid_from(&pidfile);
        std::thread::sleep(Duration::from_millis(200));
        assert!(child.try_wait().unwrap().is_none(), "the flood alone does not kill the shim");

        let asked = Instant::now();
        assert!(probelet::shim::ask_to_kill_tree(&agent));
        let status = wait(&mut child);
        assert!(
            asked.elapsed() < probelet::shim::TREE_KILL_WAIT,
            "killed on the request, in {:?}",
            asked.elapsed()
        );
        assert_eq!(status.signal(), Some(9), "the command was SIGKILLed by the shim");
        assert_gone(escaped);
        let _ = std::fs::remove_file(&pidfile);
    }
}

/// A shim that has killed its whole tree says so on the control socket before it ends, even
/// when it then dies of its command's signal: the agent need not look for the container's
/// marked processes (a look reads every process's environment; one per container stopped at
/// once kept a 1,500-container agent busy past its shutdown deadline). A shim killed before it
/// could kill its tree says nothing, and the look happens.
#[test]
fn a_shim_says_it_killed_its_tree_and_a_killed_shim_cannot() {
    use std::os::unix::net::UnixStream;

    let start = |script: &str| {
        let (agent, theirs) = UnixStream::pair().unwrap();
        let child = shim(&["--", "sh", "-c", script])
            .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
            .spawn()
            .unwrap();
        let mut report = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(&agent), &mut report).unwrap();
        assert_eq!(report, "started\n");
        (agent, child)
    };

    let pidfile = temp("said-tree-killed");
    let (agent, mut child) = start(&escaping(&pidfile, 300, "kill -TERM $$"));
    let _tree = TreeKilledOnDrop(child.id());
    let escaped = pid_from(&pidfile);
    assert_eq!(wait(&mut child).signal(), Some(15), "the shim dies of its command's signal");
    assert_gone(escaped);
    assert!(probelet::shim::said_tree_killed(&agent), "said before it ended");
    let _ = std::fs::remove_file(&pidfile);

    let pidfile = temp("killed-shim");
    let (agent, mut child) = start(&escaping(&pidfile, 300, "exec sleep 300"));
    let _tree = TreeKilledOnDrop(child.id());
    let escaped = pid_from(&pidfile);
    child.kill().unwrap();
    assert_eq!(wait(&mut child).signal(), Some(9));
    assert!(!probelet::shim::said_tree_killed(&agent), "a killed shim says nothing");
    let _ = Command::new("kill").args(["-KILL", &escaped.to_string()]).status();
    let _ = std::fs::remove_file(&pidfile);
}

/// A command that ends before the agent reads the shim's report: the report and the
/// tree-killed byte arrive together, and reading the report leaves the byte on the socket.
/// Before, a buffered read took both and dropped the byte, and the agent looked through every
/// process for the container's marks after each such container.
#[test]
fn reading_the_report_leaves_the_tree_killed_byte() {
    use std::os::unix::net::UnixStream;
    let (agent, theirs) = UnixStream::pair().unwrap();
    let mut child = shim(&["--", "sh", "-c", "exit 3"])
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .spawn()
        .unwrap();
    assert_eq!(wait(&mut child).code(), Some(3));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (report, control) = runtime.block_on(probelet::shim::Report::receive(agent)).unwrap();
    assert!(matches!(report, probelet::shim::Report::Started));
    assert!(probelet::shim::said_tree_killed(&control), "the byte after the report is still there");
}

/// Not a test: run as a container's command by the test below (`--ignored`), it copies its
/// shim's standard input (`pidfd_getfd`), as a container would to read the agent's kill
/// request off the control socket, and prints the outcome.
#[test]
#[ignore = "a container's command for the_container_cannot_copy_the_shims_descriptors"]
fn steal_the_shims_standard_input() {
    let shim = rustix::process::getppid().expect("a parent");
    let outcome = rustix::process::pidfd_open(shim, rustix::process::PidfdFlags::empty())
        .and_then(|pidfd| rustix::process::pidfd_getfd(&pidfd, 0, rustix::process::PidfdGetfdFlags::empty()));
    match outcome {
        Ok(_) => println!("STOLE"),
        Err(errno) => println!("REFUSED {}", errno.raw_os_error()),
    }
}

/// The shim is not dumpable: its container, running as the same user, cannot take a copy of
/// its descriptors (and so cannot read the agent's kill request off the control socket before
/// the shim does). Needs root, to run the shim and its command as another user (as root, with
/// CAP_SYS_PTRACE, the copy is allowed); skipped otherwise.
#[test]
fn the_container_cannot_copy_the_shims_descriptors() {
    use std::os::unix::fs::PermissionsExt as _;
    use std::os::unix::process::CommandExt as _;

    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root to run the shim as another user");
        return;
    }
    // Both binaries where another user may run them.
    let dir = temp("steal-bin");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (probelet, thief) = (dir.join("probelet"), dir.join("thief"));
    std::fs::copy(PROBELET, &probelet).unwrap();
    std::fs::copy(std::env::current_exe().unwrap(), &thief).unwrap();
    let output = Command::new(&probelet)
        .args(["container-shim", "--"])
        .arg(&thief)
        .args([
            "--exact",
            "steal_the_shims_standard_input",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .uid(65534)
        .gid(65534)
        .current_dir(&dir)
        .stdin(Stdio::null())
        .process_group(0)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("REFUSED 1"), "EPERM expected: {text} {}", String::from_utf8_lossy(&output.stderr));
}

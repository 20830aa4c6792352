//! The probe dialer's host-name lookups: the system resolver on a thread of its own, one lookup
//! per name in flight, shared by every probe that asks for that name while it is in flight, as
//! Go's resolver shares one (`lookupGroup`, a singleflight keyed by network and host).
//!
//! * **Shared.** A probe that asks for a name being looked up waits for that lookup's answer
//!   instead of starting its own: 1,000 probes of `my-service.ns.svc` due in the same second make
//!   one thread and one getaddrinfo call. The key is the name alone; each probe sets its own port
//!   on the answer's addresses (std's resolver asks for no service either). The answer is kept
//!   only while its lookup is in flight: once given, the next probe of the name looks it up
//!   again, as in Go, which keeps no answers.
//! * **A probe that gives up takes nothing from the others.** A probe whose deadline passes stops
//!   waiting (`i/o timeout`, from the dialer) and the lookup goes on for the probes still waiting,
//!   and for those that ask while it is in flight. Go cancels a lookup whose only caller gave up
//!   and lets the next caller start another; getaddrinfo cannot be stopped, so here the thread
//!   runs until the resolver answers, and a later probe of the name joins it rather than start a
//!   second thread for the same name.
//! * **At most 512 threads, one per distinct name in flight** (tokio's cap on its blocking pool,
//!   where the lookups ran before). A name past the cap waits for a thread to end, within its
//!   probe's deadline; a probe that gives up while waiting leaves its place to the next. A name
//!   the resolver is slow to answer (its timeouts and attempts, for each search domain) holds one
//!   of the 512 until the resolver answers, however many of its probes gave up; only 512 slow
//!   names in flight at once fill the cap.
//! * **No thread to spare.** The thread is made with `std::thread::Builder`: when none can be
//!   made (a pids cgroup or RLIMIT_NPROC full), every probe waiting for the name fails with the
//!   OS error in Go's words (`resource temporarily unavailable`). tokio's `spawn_blocking`, which
//!   `tokio::net::lookup_host` uses, panics there (docs/reliability.md, "No process to spare").
//! * **A resolver that panics** gives every probe waiting the answer of one that finds nothing:
//!   `no such host`.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

/// The most lookup threads at once.
const MAX_LOOKUP_THREADS: usize = 512;

/// Go's text for a name no one knows.
const NO_SUCH_HOST: &str = "no such host";

/// What a lookup found: the addresses, each with port 0, or why it failed, in Go's words.
type Found = Result<Arc<[SocketAddr]>, String>;

/// A resolver: the addresses of a name, each with port 0.
type Resolver = fn(&str) -> io::Result<Vec<SocketAddr>>;

/// A lookup handed to a new thread.
type Job = Box<dyn FnOnce() + Send>;

/// The lookups of the probes of this process.
static LOOKUPS: LazyLock<Lookups> = LazyLock::new(|| Lookups::new(MAX_LOOKUP_THREADS, system_resolver));

/// Resolves `host` (a DNS name) with the system resolver, on a thread named `probe-lookup` shared
/// with every probe asking for `host` meanwhile; the addresses come with `port`. The error is
/// the lookup's reason, as [`super::DialError::Lookup`] shows it.
pub(super) async fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    LOOKUPS
        .resolve_on(host, port, |lookup| {
            std::thread::Builder::new().name("probe-lookup".to_owned()).spawn(lookup).map(drop)
        })
        .await
}

/// The system resolver (getaddrinfo).
fn system_resolver(name: &str) -> io::Result<Vec<SocketAddr>> {
    use std::net::ToSocketAddrs;
    (name, 0).to_socket_addrs().map(Iterator::collect)
}

/// Where a lookup is.
#[derive(Clone, Debug)]
enum Progress {
    /// Waiting for a thread to be allowed (the cap is reached).
    Waiting,
    /// Running on its thread.
    Started,
    /// Answered; the lookup is no longer in flight.
    Done(Found),
}

/// One name's lookup in flight; its probes watch its progress.
struct InFlight {
    progress: watch::Sender<Progress>,
    /// Its waiters, counted under the map's lock, where each joins and leaves. The watch's own
    /// count of receivers falls outside it (a leaving waiter's receiver is dropped after its
    /// `Drop`): two waiters leaving at once on two threads could each count the other, and the
    /// lookup stayed in the map with no one waiting, until the name's next probe started it.
    waiters: AtomicUsize,
}

impl InFlight {
    /// Marks the lookup started, unless another probe started it: whether this caller did.
    fn start(&self) -> bool {
        self.progress.send_if_modified(|progress| match progress {
            Progress::Waiting => {
                *progress = Progress::Started;
                true
            }
            Progress::Started | Progress::Done(_) => false,
        })
    }
}

/// The lookups in flight, by name, and the threads they may use.
#[derive(Clone)]
struct Lookups {
    inner: Arc<Shared>,
}

struct Shared {
    in_flight: Mutex<HashMap<String, Arc<InFlight>>>,
    threads: Arc<Semaphore>,
    resolver: Resolver,
}

impl Lookups {
    fn new(max_threads: usize, resolver: Resolver) -> Self {
        Self {
            inner: Arc::new(Shared {
                in_flight: Mutex::new(HashMap::new()),
                threads: Arc::new(Semaphore::new(max_threads)),
                resolver,
            }),
        }
    }

    /// The lookups in flight. Nothing panics while holding it, but a poisoned map is still
    /// whole: every change to it is one insert or one remove.
    fn in_flight(&self) -> MutexGuard<'_, HashMap<String, Arc<InFlight>>> {
        self.inner.in_flight.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Resolves `host`, joining its lookup in flight or starting one, whose thread `spawn` makes
    /// when this caller is the one to start it.
    async fn resolve_on(
        &self,
        host: &str,
        port: u16,
        spawn: impl FnOnce(Job) -> io::Result<()>,
    ) -> Result<Vec<SocketAddr>, String> {
        let mut waiter = self.join(host);
        let addrs = waiter.answer(spawn).await?;
        Ok(addrs
            .iter()
            .map(|&addr| {
                let mut addr = addr;
                addr.set_port(port);
                addr
            })
            .collect())
    }

    /// A waiter for `name`'s lookup in flight, new if there is none.
    fn join(&self, name: &str) -> Waiter {
        let mut in_flight = self.in_flight();
        let lookup = match in_flight.get(name) {
            Some(lookup) => Arc::clone(lookup),
            None => {
                let lookup = Arc::new(InFlight {
                    progress: watch::Sender::new(Progress::Waiting),
                    waiters: AtomicUsize::new(0),
                });
                in_flight.insert(name.to_owned(), Arc::clone(&lookup));
                lookup
            }
        };
        lookup.waiters.fetch_add(1, Ordering::SeqCst);
        let progress = lookup.progress.subscribe();
        Waiter { lookups: self.clone(), name: name.to_owned(), lookup, progress }
    }

    /// Starts `name`'s lookup on a thread `spawn` makes, the thread holding `permit` until the
    /// resolver answers; when no thread can be made, that is every waiter's answer.
    fn start(
        &self,
        name: &str,
        lookup: &Arc<InFlight>,
        permit: OwnedSemaphorePermit,
        spawn: impl FnOnce(Job) -> io::Result<()>,
    ) {
        let (lookups, owned_name, owned_lookup) = (self.clone(), name.to_owned(), Arc::clone(lookup));
        let resolver = self.inner.resolver;
        let job: Job = Box::new(move || {
            let _permit = permit;
            // Made on the thread: a job dropped unrun, for want of a thread, answers nothing.
            let answer = Answer { lookups, name: owned_name, lookup: owned_lookup, given: false };
            let found = resolver(&answer.name);
            answer.give(found.map(Arc::from).map_err(|e| super::lookup_reason(&e)));
        });
        if let Err(e) = spawn(job) {
            tracing::debug!(host = name, error = %e, "Cannot start a thread to resolve a probe's host");
            self.finish(name, lookup, Err(super::errno_text(&e)));
        }
    }

    /// Takes `name`'s lookup out of flight and gives its waiters `found`.
    fn finish(&self, name: &str, lookup: &Arc<InFlight>, found: Found) {
        let mut in_flight = self.in_flight();
        if in_flight.get(name).is_some_and(|current| Arc::ptr_eq(current, lookup)) {
            in_flight.remove(name);
        }
        lookup.progress.send_replace(Progress::Done(found));
    }
}

/// A lookup's answer to give, from its thread: `no such host` if the resolver panics.
struct Answer {
    lookups: Lookups,
    name: String,
    lookup: Arc<InFlight>,
    given: bool,
}

impl Answer {
    fn give(mut self, found: Found) {
        self.lookups.finish(&self.name, &self.lookup, found);
        self.given = true;
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        if !self.given {
            self.lookups.finish(&self.name, &self.lookup, Err(NO_SUCH_HOST.to_owned()));
        }
    }
}

/// A probe waiting for a name's lookup.
struct Waiter {
    lookups: Lookups,
    name: String,
    lookup: Arc<InFlight>,
    progress: watch::Receiver<Progress>,
}

impl Waiter {
    /// The lookup's answer. While the lookup waits for a thread, so does every waiter: the first
    /// one allowed starts it with `spawn`.
    async fn answer(&mut self, spawn: impl FnOnce(Job) -> io::Result<()>) -> Found {
        let mut spawn = Some(spawn);
        loop {
            let progress = self.progress.borrow_and_update().clone();
            let changed = match progress {
                Progress::Done(found) => return found,
                Progress::Started => self.progress.changed().await,
                Progress::Waiting => {
                    let threads = Arc::clone(&self.lookups.inner.threads);
                    tokio::select! {
                        changed = self.progress.changed() => changed,
                        permit = threads.acquire_owned() => {
                            // The semaphore is never closed.
                            let Ok(permit) = permit else { return Err(NO_SUCH_HOST.to_owned()) };
                            // Otherwise another waiter started it, and the permit goes back.
                            if self.lookup.start()
                                && let Some(spawn) = spawn.take()
                            {
                                self.lookups.start(&self.name, &self.lookup, permit, spawn);
                            }
                            Ok(())
                        }
                    }
                }
            };
            // The sender lives as long as this waiter's `lookup`.
            if changed.is_err() {
                return Err(NO_SUCH_HOST.to_owned());
            }
        }
    }
}

impl Drop for Waiter {
    /// The last waiter of a lookup still waiting for a thread takes it out of flight: no one is
    /// left to start it. A started lookup stays, for its thread to answer.
    fn drop(&mut self) {
        let mut in_flight = self.lookups.in_flight();
        let others = self.lookup.waiters.fetch_sub(1, Ordering::SeqCst) - 1;
        let waiting = matches!(*self.lookup.progress.borrow(), Progress::Waiting);
        if waiting
            && others == 0
            && in_flight.get(&self.name).is_some_and(|current| Arc::ptr_eq(current, &self.lookup))
        {
            in_flight.remove(&self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::task::Poll;
    use std::time::Duration;

    use futures::poll;

    use super::*;

    /// A resolver that knows `svc.ns` and `slow.ns` (which the tests answer late) and no other.
    fn known(name: &str) -> io::Result<Vec<SocketAddr>> {
        match name {
            "svc.ns" => Ok(vec!["10.0.0.1:0".parse().unwrap(), "[fd00::1]:0".parse().unwrap()]),
            "slow.ns" => Ok(vec!["10.0.0.2:0".parse().unwrap()]),
            _ => Err(io::Error::other("failed to lookup address information: Name or service not known")),
        }
    }

    fn panics(_: &str) -> io::Result<Vec<SocketAddr>> {
        panic!("the resolver failed")
    }

    /// A spawner that keeps each lookup instead of running it: a test runs them when it likes.
    #[derive(Clone, Default)]
    struct Held {
        jobs: Arc<Mutex<Vec<Job>>>,
        spawned: Arc<AtomicUsize>,
    }

    impl Held {
        fn spawn(&self) -> impl FnOnce(Job) -> io::Result<()> + use<> {
            let held = self.clone();
            move |job| {
                held.spawned.fetch_add(1, Ordering::SeqCst);
                held.jobs.lock().unwrap().push(job);
                Ok(())
            }
        }

        fn spawned(&self) -> usize {
            self.spawned.load(Ordering::SeqCst)
        }

        fn run_all(&self) {
            let jobs = std::mem::take(&mut *self.jobs.lock().unwrap());
            for job in jobs {
                job();
            }
        }
    }

    /// A spawner that runs the lookup at once, on the caller's thread.
    fn at_once(job: Job) -> io::Result<()> {
        job();
        Ok(())
    }

    fn with_port(addrs: &[&str], port: u16) -> Vec<SocketAddr> {
        addrs.iter().map(|a| SocketAddr::new(a.parse().unwrap(), port)).collect()
    }

    #[tokio::test]
    async fn a_name_is_resolved_on_a_thread_of_its_own() {
        let addrs = resolve("localhost", 80).await.expect("localhost resolves");
        assert!(addrs.iter().all(|a| a.ip().is_loopback() && a.port() == 80), "{addrs:?}");
        assert!(!addrs.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_lookups_of_a_name_share_one_thread() {
        let lookups = Lookups::new(MAX_LOOKUP_THREADS, known);
        let held = Held::default();
        let mut waiters: Vec<_> =
            (0..100).map(|i| Box::pin(lookups.resolve_on("svc.ns", 8000 + i, held.spawn()))).collect();
        for waiter in &mut waiters {
            assert!(poll!(waiter).is_pending());
        }
        assert_eq!(held.spawned(), 1, "one thread for the name");
        held.run_all();
        for (port, waiter) in (8000..).zip(waiters) {
            assert_eq!(waiter.await, Ok(with_port(&["10.0.0.1", "fd00::1"], port)), "each with its port");
        }
        assert!(lookups.in_flight().is_empty());
        // The answer is not kept: the next probe asks again.
        let mut again = Box::pin(lookups.resolve_on("svc.ns", 80, held.spawn()));
        assert!(poll!(&mut again).is_pending());
        assert_eq!(held.spawned(), 2);
        held.run_all();
        assert_eq!(again.await, Ok(with_port(&["10.0.0.1", "fd00::1"], 80)));
        // A name the resolver does not know: every waiter in Go's words.
        let mut unknown: Vec<_> =
            (0..3).map(|_| Box::pin(lookups.resolve_on("nope.ns", 80, held.spawn()))).collect();
        for waiter in &mut unknown {
            assert!(poll!(waiter).is_pending());
        }
        assert_eq!(held.spawned(), 3);
        held.run_all();
        for waiter in unknown {
            assert_eq!(waiter.await, Err("no such host".to_owned()));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_that_gives_up_leaves_the_lookup_to_the_others() {
        let lookups = Lookups::new(MAX_LOOKUP_THREADS, known);
        let held = Held::default();
        let mut starter = Box::pin(lookups.resolve_on("svc.ns", 80, held.spawn()));
        let mut other = Box::pin(lookups.resolve_on("svc.ns", 81, held.spawn()));
        assert!(poll!(&mut starter).is_pending());
        assert!(poll!(&mut other).is_pending());
        // The one that started the lookup reaches its deadline.
        assert!(tokio::time::timeout(Duration::from_secs(1), &mut starter).await.is_err());
        drop(starter);
        // One that asks meanwhile joins the lookup still in flight.
        let mut late = Box::pin(lookups.resolve_on("svc.ns", 82, held.spawn()));
        assert!(poll!(&mut late).is_pending());
        assert_eq!(held.spawned(), 1);
        held.run_all();
        assert_eq!(other.await, Ok(with_port(&["10.0.0.1", "fd00::1"], 81)));
        assert_eq!(late.await, Ok(with_port(&["10.0.0.1", "fd00::1"], 82)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_name_holds_one_thread_however_many_of_its_probes_give_up() {
        let lookups = Lookups::new(2, known);
        let held = Held::default();
        for _ in 0..10 {
            let gave_up =
                tokio::time::timeout(Duration::from_secs(1), lookups.resolve_on("slow.ns", 80, held.spawn()));
            assert!(gave_up.await.is_err(), "the resolver has not answered");
        }
        assert_eq!(held.spawned(), 1, "the probes after the first joined its lookup");
        // The other thread is there for another name.
        let other = tokio::time::timeout(Duration::from_secs(1), lookups.resolve_on("svc.ns", 80, at_once));
        assert_eq!(other.await.expect("a thread to spare"), Ok(with_port(&["10.0.0.1", "fd00::1"], 80)));
        held.run_all();
        assert!(lookups.in_flight().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_that_gives_up_waiting_for_a_thread_takes_nothing_from_the_others() {
        let lookups = Lookups::new(1, known);
        let held = Held::default();
        let mut slow = Box::pin(lookups.resolve_on("slow.ns", 80, held.spawn()));
        assert!(poll!(&mut slow).is_pending());
        // No thread to spare: both wait for one, and the first gives up.
        let mut first = Box::pin(lookups.resolve_on("svc.ns", 80, held.spawn()));
        let mut second = Box::pin(lookups.resolve_on("svc.ns", 81, held.spawn()));
        assert!(poll!(&mut first).is_pending());
        assert!(poll!(&mut second).is_pending());
        drop(first);
        // One whose every waiter gave up before it could start is no longer in flight.
        let mut alone = Box::pin(lookups.resolve_on("nope.ns", 80, held.spawn()));
        assert!(poll!(&mut alone).is_pending());
        drop(alone);
        assert!(!lookups.in_flight().contains_key("nope.ns"));
        assert_eq!(held.spawned(), 1);
        // The slow name's thread ends: the second waiter starts the lookup.
        held.run_all();
        assert_eq!(slow.await, Ok(with_port(&["10.0.0.2"], 80)));
        assert!(poll!(&mut second).is_pending());
        assert_eq!(held.spawned(), 2);
        held.run_all();
        assert_eq!(second.await, Ok(with_port(&["10.0.0.1", "fd00::1"], 81)));
    }

    /// The last waiter of a lookup waiting for a thread takes it out of flight, though two
    /// leave at once on two threads: each used to be told of the other by the watch's count of
    /// receivers, which falls after a waiter's `Drop`, and both could leave the lookup in the
    /// map. Many tries, as the two threads fall: most failed without the fix.
    #[test]
    fn waiters_leaving_at_once_on_two_threads_take_their_lookup_out_of_flight() {
        for _ in 0..2000 {
            let lookups = Lookups::new(1, known);
            let (first, second) = (lookups.join("svc.ns"), lookups.join("svc.ns"));
            let together = Arc::new(std::sync::Barrier::new(2));
            let other = {
                let together = Arc::clone(&together);
                std::thread::spawn(move || {
                    together.wait();
                    drop(first);
                })
            };
            together.wait();
            drop(second);
            other.join().unwrap();
            assert!(lookups.in_flight().is_empty(), "no one waits for it");
        }
    }

    /// No thread to resolve on (a full pids cgroup: `EAGAIN`): every waiter fails, in Go's words
    /// for the OS error. `agent_exhaustion` runs the real thing in a full pids cgroup.
    #[tokio::test(start_paused = true)]
    async fn no_thread_for_a_lookup_fails_every_waiter_with_the_os_error() {
        let lookups = Lookups::new(1, known);
        let held = Held::default();
        let tries = Arc::new(AtomicUsize::new(0));
        let no_thread = || {
            let tries = Arc::clone(&tries);
            move |_| {
                tries.fetch_add(1, Ordering::SeqCst);
                Err(io::Error::from_raw_os_error(11))
            }
        };
        // The waiters gather while the one thread is taken.
        let mut slow = Box::pin(lookups.resolve_on("slow.ns", 80, held.spawn()));
        assert!(poll!(&mut slow).is_pending());
        let mut waiters: Vec<_> =
            (0..3).map(|_| Box::pin(lookups.resolve_on("svc.ns", 80, no_thread()))).collect();
        for waiter in &mut waiters {
            assert!(poll!(waiter).is_pending());
        }
        held.run_all();
        for waiter in waiters {
            assert_eq!(waiter.await, Err("resource temporarily unavailable".to_owned()));
        }
        assert_eq!(tries.load(Ordering::SeqCst), 1, "one try for all");
        assert!(lookups.in_flight().is_empty());
        // Not kept: the next probe tries again.
        assert_eq!(
            lookups.resolve_on("svc.ns", 80, no_thread()).await,
            Err("resource temporarily unavailable".to_owned())
        );
        assert_eq!(tries.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_resolver_that_panics_fails_every_waiter_with_no_such_host() {
        let lookups = Lookups::new(MAX_LOOKUP_THREADS, panics);
        let held = Held::default();
        let mut waiters: Vec<_> =
            (0..3).map(|_| Box::pin(lookups.resolve_on("svc.ns", 80, held.spawn()))).collect();
        for waiter in &mut waiters {
            assert!(poll!(waiter).is_pending());
        }
        let jobs = std::mem::take(&mut *held.jobs.lock().unwrap());
        for job in jobs {
            assert!(std::thread::spawn(job).join().is_err(), "the resolver panicked");
        }
        // Answered when the thread ended.
        for waiter in &mut waiters {
            assert_eq!(poll!(waiter), Poll::Ready(Err("no such host".to_owned())));
        }
        assert!(lookups.in_flight().is_empty());
    }
}

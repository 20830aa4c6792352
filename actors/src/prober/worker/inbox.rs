//! A worker's inbox: the messages its [`super::WorkerHandle`]s send it, in order, and how the
//! worker learns of them. It owns the queue, the flag that says it is not empty, and the
//! worker's waker.
//!
//! Written here rather than taken from `futures::channel::mpsc`: a worker looks at its inbox at
//! every wake-up (every tick, every probe's I/O), and a message comes a few times in a worker's
//! life. mpsc's receiver registers the task's waker and walks its queue's nodes at every look,
//! memory that has gone cold since the worker's last probe a period ago. Here a look is one
//! load of a flag; the waker is handed over only when it is not the one handed over before,
//! which for a task is once. docs/benchmarks.md ("TCP at 1,000: fewer cold reads per probe")
//! has what it saved.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, RawWakerVTable, Waker};

/// What the senders and the receiver share.
#[derive(Debug)]
struct Shared<T> {
    /// Messages are waiting, or the last sender has gone: look under the lock.
    ready: AtomicBool,
    /// Which waker `state` holds (its data and vtable addresses; zero for none), so that the
    /// receiver sees it has handed its waker over without taking the lock. Only the receiver
    /// reads and writes it; `state` keeps the waker alive, so no other waker can have it.
    registered: [AtomicUsize; 2],
    state: Mutex<State<T>>,
}

#[derive(Debug)]
struct State<T> {
    queue: VecDeque<T>,
    /// The receiver's waker, once it has looked.
    waker: Option<Waker>,
    /// How many senders there are.
    senders: usize,
    /// The receiver has gone: sends fail.
    receiver_gone: bool,
}

impl<T> Default for State<T> {
    fn default() -> Self {
        State { queue: VecDeque::new(), waker: None, senders: 0, receiver_gone: false }
    }
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // Nothing panics while holding the lock but a waker's `wake_by_ref`, after which the
        // state is whole.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks the inbox ready and wakes the receiver; under the lock, so a receiver that takes
    /// the last message and clears the flag cannot clear it after this sets it.
    fn wake(&self, state: &State<T>) {
        self.ready.store(true, Ordering::Release);
        if let Some(waker) = &state.waker {
            waker.wake_by_ref();
        }
    }
}

/// A sending end; clones send to the same receiver.
#[derive(Debug)]
pub(super) struct Sender<T> {
    shared: Arc<Shared<T>>,
}

/// The receiving end, held by the worker.
#[derive(Debug)]
pub(super) struct Receiver<T> {
    shared: Arc<Shared<T>>,
}

/// What [`Receiver::poll_recv`] found.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Received<T> {
    /// The next message.
    Message(T),
    /// Nothing yet; the task is woken when something comes.
    Empty,
    /// Every sender has gone and every message has been taken.
    Closed,
}

/// A new inbox: one sender and its receiver.
pub(super) fn inbox<T>() -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        ready: AtomicBool::new(false),
        registered: [AtomicUsize::new(0), AtomicUsize::new(0)],
        state: Mutex::new(State::default()),
    });
    shared.lock().senders = 1;
    (Sender { shared: shared.clone() }, Receiver { shared })
}

impl<T> Sender<T> {
    /// Queues `message`; gives it back when the receiver has gone.
    pub(super) fn send(&self, message: T) -> Result<(), T> {
        let mut state = self.shared.lock();
        if state.receiver_gone {
            return Err(message);
        }
        state.queue.push_back(message);
        self.shared.wake(&state);
        Ok(())
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.shared.lock().senders += 1;
        Sender { shared: self.shared.clone() }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.senders -= 1;
        if state.senders == 0 {
            self.shared.wake(&state);
        }
    }
}

impl<T> Receiver<T> {
    /// The next message, if one is waiting. Registers the task's waker first (when it is not
    /// the one registered already), so a message sent after the look wakes the task.
    pub(super) fn poll_recv(&mut self, task: &mut Context<'_>) -> Received<T> {
        // `Waker::will_wake`'s test (same data, same vtable), against the waker handed over.
        let waker = task.waker();
        let identity = [waker.data() as usize, std::ptr::from_ref::<RawWakerVTable>(waker.vtable()) as usize];
        let [data, vtable] = &self.shared.registered;
        if data.load(Ordering::Relaxed) != identity[0] || vtable.load(Ordering::Relaxed) != identity[1] {
            self.shared.lock().waker = Some(waker.clone());
            data.store(identity[0], Ordering::Relaxed);
            vtable.store(identity[1], Ordering::Relaxed);
        }
        if !self.shared.ready.load(Ordering::Acquire) {
            return Received::Empty;
        }
        let mut state = self.shared.lock();
        let next = state.queue.pop_front();
        let closed = state.senders == 0;
        if state.queue.is_empty() && !closed {
            self.shared.ready.store(false, Ordering::Relaxed);
        }
        match next {
            Some(message) => Received::Message(message),
            None if closed => Received::Closed,
            // The flag is set with a message or at the close, so this is not seen; the flag is
            // cleared above all the same.
            None => Received::Empty,
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.receiver_gone = true;
        // The worker's task is not kept alive by a handle the manager still holds.
        state.waker = None;
        state.queue.clear();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the failure report
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    /// A waker that counts its wakes.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn task() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count::default());
        (count.clone(), Waker::from(count))
    }

    #[test]
    fn messages_come_in_order_and_each_send_wakes_the_receiver() {
        let (sender, mut receiver) = inbox();
        let (count, waker) = task();
        let mut cx = Context::from_waker(&waker);
        assert_eq!(receiver.poll_recv(&mut cx), Received::Empty);
        sender.send(1).unwrap();
        sender.clone().send(2).unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 2, "a send after a look wakes the task");
        assert_eq!(receiver.poll_recv(&mut cx), Received::Message(1));
        assert_eq!(receiver.poll_recv(&mut cx), Received::Message(2));
        assert_eq!(receiver.poll_recv(&mut cx), Received::Empty);
        sender.send(3).unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 3);
        assert_eq!(receiver.poll_recv(&mut cx), Received::Message(3));
    }

    #[test]
    fn a_message_sent_before_the_first_look_is_received() {
        let (sender, mut receiver) = inbox();
        sender.send("early").unwrap();
        let (_, waker) = task();
        assert_eq!(receiver.poll_recv(&mut Context::from_waker(&waker)), Received::Message("early"));
    }

    #[test]
    fn a_new_waker_replaces_the_old_one() {
        let (sender, mut receiver) = inbox::<u8>();
        let (first, waker) = task();
        assert_eq!(receiver.poll_recv(&mut Context::from_waker(&waker)), Received::Empty);
        let (second, waker) = task();
        assert_eq!(receiver.poll_recv(&mut Context::from_waker(&waker)), Received::Empty);
        sender.send(1).unwrap();
        assert_eq!((first.0.load(Ordering::SeqCst), second.0.load(Ordering::SeqCst)), (0, 1));
    }

    #[test]
    fn the_last_sender_gone_closes_the_inbox_after_its_messages() {
        let (sender, mut receiver) = inbox();
        let (count, waker) = task();
        let mut cx = Context::from_waker(&waker);
        assert_eq!(receiver.poll_recv(&mut cx), Received::Empty);
        let other = sender.clone();
        other.send(1).unwrap();
        drop(sender);
        assert_eq!(receiver.poll_recv(&mut cx), Received::Message(1), "one sender is left");
        assert_eq!(receiver.poll_recv(&mut cx), Received::Empty);
        let before = count.0.load(Ordering::SeqCst);
        drop(other);
        assert_eq!(count.0.load(Ordering::SeqCst), before + 1, "the last sender's going wakes the task");
        assert_eq!(receiver.poll_recv(&mut cx), Received::Closed);
        assert_eq!(receiver.poll_recv(&mut cx), Received::Closed);
    }

    #[test]
    fn sends_fail_once_the_receiver_is_gone_and_it_lets_go_of_the_waker() {
        let (sender, mut receiver) = inbox();
        let (count, waker) = task();
        assert_eq!(receiver.poll_recv(&mut Context::from_waker(&waker)), Received::Empty);
        drop(waker);
        drop(receiver);
        assert_eq!(sender.send(7), Err(7));
        assert_eq!(Arc::strong_count(&count), 1, "the task's waker is not held by its senders");
    }
}

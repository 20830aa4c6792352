//! client-go's event correlator: aggregation, counting and the spam filter.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::Hash;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use probelet_actors::sync::rate::TokenBucket;
use tokio::time::Instant;

/// Keys the correlator keeps, per cache (client-go's `maxLruCacheEntries`).
pub const EVENT_CACHE_SIZE: usize = 4096;
/// Events a source may send about one object at once (client-go's `defaultSpamBurst`).
pub const SPAM_BURST: u32 = 25;
/// One more event about an object is allowed per this period (`defaultSpamQPS` = 1/300).
pub const SPAM_REFILL_PERIOD: Duration = Duration::from_secs(300);
/// Distinct messages of one reason about one object before they are combined
/// (`defaultAggregateMaxEvents`).
pub const AGGREGATE_MAX_EVENTS: usize = 10;
/// How long a group of similar events stays open (`defaultAggregateIntervalInSeconds`).
pub const AGGREGATE_INTERVAL: Duration = Duration::from_secs(600);
/// The message prefix of a combined event (`EventAggregatorByReasonMessageFunc`).
pub const AGGREGATE_MESSAGE_PREFIX: &str = "(combined from similar events): ";

/// The object an event is about, as client-go's spam key names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ObjectKey {
    kind: String,
    namespace: String,
    name: String,
    uid: String,
    api_version: String,
}

impl ObjectKey {
    fn of(object: &ObjectReference) -> Self {
        let s = |v: &Option<String>| v.clone().unwrap_or_default();
        ObjectKey {
            kind: s(&object.kind),
            namespace: s(&object.namespace),
            name: s(&object.name),
            uid: s(&object.uid),
            api_version: s(&object.api_version),
        }
    }
}

/// Events that differ only in their message: object, type and reason
/// (`EventAggregatorByReasonFunc`; the source is the same for every event of this agent).
type AggregateKey = (ObjectKey, String, String);

/// What the correlator counts occurrences under.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum CountKey {
    /// One event: object, field path, type, reason, message (`getEventKey`).
    Event(ObjectKey, String, String, String, String),
    /// The combined event of an aggregate group.
    Aggregate(AggregateKey),
}

/// A map that forgets its least recently used entry beyond `capacity` (groupcache's
/// `lru.Cache`, which client-go's correlator uses).
struct Lru<K, V> {
    capacity: usize,
    entries: HashMap<K, (V, u64)>,
    /// Last use → key; the first entry is the least recently used.
    order: BTreeMap<u64, K>,
    tick: u64,
}

impl<K: Clone + Eq + Hash, V> Lru<K, V> {
    fn new(capacity: usize) -> Self {
        Lru { capacity: capacity.max(1), entries: HashMap::new(), order: BTreeMap::new(), tick: 0 }
    }

    /// The value, marked most recently used.
    fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.tick += 1;
        let (value, used) = self.entries.get_mut(key)?;
        self.order.remove(used);
        *used = self.tick;
        self.order.insert(self.tick, key.clone());
        Some(value)
    }

    /// Adds or replaces an entry as the most recently used, forgetting the least recently
    /// used one when full.
    fn insert(&mut self, key: K, value: V) {
        self.tick += 1;
        if let Some((_, used)) = self.entries.insert(key.clone(), (value, self.tick)) {
            self.order.remove(&used);
        }
        self.order.insert(self.tick, key);
        while self.entries.len() > self.capacity {
            let Some((_, oldest)) = self.order.pop_first() else { break };
            self.entries.remove(&oldest);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// The spam filter's bucket for one object: [`SPAM_BURST`] tokens, one more per
/// [`SPAM_REFILL_PERIOD`], refusing rather than waiting.
fn spam_bucket(now: Instant) -> TokenBucket {
    TokenBucket::new(1.0 / SPAM_REFILL_PERIOD.as_secs_f64(), SPAM_BURST, now)
}

/// The messages seen of one aggregate group.
struct AggregateRecord {
    messages: BTreeSet<String>,
    last: Instant,
}

/// What was written (or is being written) for one count key.
#[derive(Clone)]
struct Observation {
    name: String,
    count: i32,
    first_timestamp: Time,
}

/// One event to write, after correlation.
#[derive(Debug, Clone, PartialEq)]
pub struct CorrelatedEvent {
    /// The Event's name: new, or that of the Event the earlier occurrences went to.
    pub name: String,
    pub message: String,
    pub count: i32,
    pub first_timestamp: Time,
    /// A repeat: patch `count`, `lastTimestamp` and `message` of the existing Event (and create
    /// it again if it is gone).
    pub update_existing: bool,
}

/// client-go's `EventCorrelator`: combines similar events, counts repeats into one Event and
/// drops events about an object beyond its spam budget. Every cache is an LRU of
/// [`EVENT_CACHE_SIZE`] keys, so memory stays bounded however many pods come and go.
pub struct EventCorrelator {
    aggregates: Lru<AggregateKey, AggregateRecord>,
    counts: Lru<CountKey, Observation>,
    spam: Lru<ObjectKey, TokenBucket>,
}

impl Default for EventCorrelator {
    fn default() -> Self {
        EventCorrelator {
            aggregates: Lru::new(EVENT_CACHE_SIZE),
            counts: Lru::new(EVENT_CACHE_SIZE),
            spam: Lru::new(EVENT_CACHE_SIZE),
        }
    }
}

impl EventCorrelator {
    /// `EventCorrelate`: aggregate, count, then filter. The count is kept even for a dropped
    /// occurrence, so the next one written carries the true total. `None`: drop this one.
    pub fn correlate(
        &mut self,
        object: &ObjectReference,
        event_type: &str,
        reason: &str,
        message: &str,
        now: Instant,
        now_time: &Time,
    ) -> Option<CorrelatedEvent> {
        let object_key = ObjectKey::of(object);
        let (message, key) = self.aggregate(object, &object_key, event_type, reason, message, now);
        let fresh_name = crate::host::events::event_name(object, now_time.0);
        let event = match self.counts.get_mut(&key) {
            Some(seen) => {
                seen.count = seen.count.saturating_add(1);
                CorrelatedEvent {
                    name: seen.name.clone(),
                    message,
                    count: seen.count,
                    first_timestamp: seen.first_timestamp.clone(),
                    update_existing: true,
                }
            }
            None => {
                let observation =
                    Observation { name: fresh_name, count: 1, first_timestamp: now_time.clone() };
                let event = CorrelatedEvent {
                    name: observation.name.clone(),
                    message,
                    count: 1,
                    first_timestamp: now_time.clone(),
                    update_existing: false,
                };
                self.counts.insert(key, observation);
                event
            }
        };
        let accepted = match self.spam.get_mut(&object_key) {
            Some(bucket) => bucket.try_accept(now),
            None => {
                let mut bucket = spam_bucket(now);
                let accepted = bucket.try_accept(now);
                self.spam.insert(object_key, bucket);
                accepted
            }
        };
        accepted.then_some(event)
    }

    /// `EventAggregate`: the message and count key, combined once [`AGGREGATE_MAX_EVENTS`]
    /// distinct messages of one reason came within [`AGGREGATE_INTERVAL`] of each other.
    fn aggregate(
        &mut self,
        object: &ObjectReference,
        object_key: &ObjectKey,
        event_type: &str,
        reason: &str,
        message: &str,
        now: Instant,
    ) -> (String, CountKey) {
        let group: AggregateKey = (object_key.clone(), event_type.to_owned(), reason.to_owned());
        let event_key = CountKey::Event(
            object_key.clone(),
            object.field_path.clone().unwrap_or_default(),
            event_type.to_owned(),
            reason.to_owned(),
            message.to_owned(),
        );
        // A group quiet for longer than the interval starts over.
        let mut messages = match self.aggregates.get_mut(&group) {
            Some(record) if now.saturating_duration_since(record.last) <= AGGREGATE_INTERVAL => {
                std::mem::take(&mut record.messages)
            }
            _ => BTreeSet::new(),
        };
        messages.insert(message.to_owned());
        let combine = messages.len() >= AGGREGATE_MAX_EVENTS;
        if combine {
            // Keep the set below the limit, so every further new message is combined too.
            messages.pop_first();
        }
        self.aggregates.insert(group.clone(), AggregateRecord { messages, last: now });
        if combine {
            (format!("{AGGREGATE_MESSAGE_PREFIX}{message}"), CountKey::Aggregate(group))
        } else {
            (message.to_owned(), event_key)
        }
    }
}

#[cfg(test)]
mod event_tests {
    use super::*;

    fn object(name: &str, container: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("Pod".into()),
            api_version: Some("v1".into()),
            namespace: Some("default".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            field_path: Some(format!("spec.containers{{{container}}}")),
            ..Default::default()
        }
    }

    fn time(nanos: i128) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_nanosecond(nanos).unwrap())
    }

    #[test]
    fn lru_forgets_the_least_recently_used() {
        let mut lru = Lru::new(3);
        for k in ["a", "b", "c"] {
            lru.insert(k, 0);
        }
        *lru.get_mut(&"a").unwrap() += 1;
        lru.insert("d", 0);
        assert!(lru.get_mut(&"b").is_none(), "b was least recently used");
        assert_eq!(lru.get_mut(&"a").copied(), Some(1));
        lru.insert("c", 5);
        lru.insert("e", 0);
        assert!(lru.get_mut(&"d").is_none(), "d was least recently used");
        assert_eq!(lru.len(), 3);
        assert_eq!(lru.get_mut(&"c").copied(), Some(5));
    }

    #[test]
    fn repeats_count_into_one_event() {
        let mut c = EventCorrelator::default();
        let now = Instant::now();
        let obj = object("web", "app");
        let first = c.correlate(&obj, "Warning", "Unhealthy", "boom", now, &time(1_000)).unwrap();
        assert_eq!(first.name, "web.3e8");
        assert_eq!((first.count, first.update_existing), (1, false));
        let second = c.correlate(&obj, "Warning", "Unhealthy", "boom", now, &time(2_000)).unwrap();
        assert_eq!(second.name, first.name, "a repeat goes to the same Event");
        assert_eq!((second.count, second.update_existing), (2, true));
        assert_eq!(second.first_timestamp, time(1_000));
        let other = c.correlate(&obj, "Warning", "Unhealthy", "other", now, &time(3_000)).unwrap();
        assert_eq!((other.name.as_str(), other.count, other.update_existing), ("web.bb8", 1, false));
        let other_container =
            c.correlate(&object("web", "side"), "Warning", "Unhealthy", "boom", now, &time(4_000)).unwrap();
        assert_eq!(other_container.count, 1, "the field path is part of the key");
    }

    #[test]
    fn spam_filter_allows_a_burst_then_one_per_period_per_object() {
        let mut c = EventCorrelator::default();
        let start = Instant::now();
        let obj = object("web", "app");
        let written = (0..30)
            .filter(|i| c.correlate(&obj, "Warning", "Unhealthy", "boom", start, &time(*i)).is_some())
            .count();
        assert_eq!(written, SPAM_BURST as usize, "the burst, then nothing");
        // Another object has its own budget.
        assert!(
            c.correlate(&object("db", "app"), "Warning", "Unhealthy", "boom", start, &time(31)).is_some()
        );
        let later = start + SPAM_REFILL_PERIOD;
        let repeat = c.correlate(&obj, "Warning", "Unhealthy", "boom", later, &time(32)).unwrap();
        assert_eq!(repeat.count, 31, "dropped occurrences still count");
        assert!(
            c.correlate(&obj, "Warning", "Unhealthy", "boom", later, &time(33)).is_none(),
            "one per period"
        );
    }

    #[test]
    fn similar_messages_are_combined_after_ten() {
        let mut c = EventCorrelator::default();
        let now = Instant::now();
        let obj = object("web", "app");
        for i in 0..(AGGREGATE_MAX_EVENTS - 1) {
            let e =
                c.correlate(&obj, "Warning", "Unhealthy", &format!("m{i}"), now, &time(i as i128)).unwrap();
            assert_eq!(e.message, format!("m{i}"));
        }
        let combined = c.correlate(&obj, "Warning", "Unhealthy", "m9", now, &time(100)).unwrap();
        assert_eq!(combined.message, "(combined from similar events): m9");
        assert_eq!((combined.count, combined.update_existing), (1, false));
        let next = c.correlate(&obj, "Warning", "Unhealthy", "m10", now, &time(200)).unwrap();
        assert_eq!(next.message, "(combined from similar events): m10");
        assert_eq!((next.name, next.count, next.update_existing), (combined.name, 2, true));
        // After the interval, the group starts over.
        let later = now + AGGREGATE_INTERVAL + Duration::from_secs(1);
        let fresh = c.correlate(&obj, "Warning", "Unhealthy", "m11", later, &time(300)).unwrap();
        assert_eq!(fresh.message, "m11");
    }

    #[test]
    fn caches_stay_bounded() {
        let mut c = EventCorrelator::default();
        let now = Instant::now();
        for i in 0..(EVENT_CACHE_SIZE + 100) {
            let obj = object(&format!("pod-{i}"), "app");
            c.correlate(&obj, "Warning", "Unhealthy", "boom", now, &time(i as i128));
        }
        assert_eq!(c.counts.len(), EVENT_CACHE_SIZE);
        assert_eq!(c.spam.len(), EVENT_CACHE_SIZE);
        assert_eq!(c.aggregates.len(), EVENT_CACHE_SIZE);
        // The oldest pod's count was forgotten: its next event is a new Event.
        let again =
            c.correlate(&object("pod-0", "app"), "Warning", "Unhealthy", "boom", now, &time(1)).unwrap();
        assert!(!again.update_existing);
    }
}

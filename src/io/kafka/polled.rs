//! A producer whose events (delivery reports, errors) are served by a thread of its own that
//! sleeps until librdkafka queues one.
//!
//! rust-rdkafka's `ThreadedProducer` serves them with `poll(100 ms)` in a loop, and that poll
//! waits on librdkafka's queue for the time left before its deadline in whole milliseconds: once
//! less than a millisecond is left, the wait rounds down to none and the thread spins until the
//! deadline passes, at the end of every 100 ms and after every report that arrives in that last
//! millisecond. Here the thread sleeps until the queue goes from empty to holding something
//! (librdkafka's queue event callback wakes it), or for `IDLE_POLL` at most, then serves what
//! the queue holds without waiting.

use std::ops::Deref;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

use rdkafka::bindings as rdsys;
use rdkafka::client::Client;
use rdkafka::config::FromClientConfigAndContext;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::producer::{BaseProducer, Producer, ProducerContext};
use rdkafka::ClientConfig;

/// The longest the serving thread sleeps without being woken.
const IDLE_POLL: Duration = Duration::from_millis(100);

/// At most this many events are served in a row before the thread looks at its stop flag.
const MAX_SERVED_IN_A_ROW: usize = 1024;

/// A `BaseProducer` (it dereferences to one: `send`, `flush`, `in_flight_count`) whose events
/// a thread of its own serves. Dropping it stops and joins that thread; what is still queued is
/// not flushed (flush first).
pub struct PolledProducer<C: ProducerContext + 'static> {
    // Dropped in this order: the thread, the callback, the queue handle, the producer.
    poller: Option<(JoinHandle<()>, Arc<AtomicBool>)>,
    #[allow(dead_code)] // kept alive for librdkafka's callback, which points at it
    wake: Box<Box<dyn Fn() + Send + Sync>>,
    queue: Arc<MainQueue>,
    producer: Arc<BaseProducer<C>>,
    /// The serving thread's id (Linux's), once it runs.
    #[cfg_attr(not(test), allow(dead_code))]
    tid: Arc<AtomicI32>,
}

/// A handle on a client's main queue, where a producer's events arrive.
struct MainQueue(*mut rdsys::rd_kafka_queue_t);

// SAFETY: librdkafka's queue functions may be called from any thread; the handle is destroyed
// once, when the last reference goes.
unsafe impl Send for MainQueue {}
unsafe impl Sync for MainQueue {}

impl MainQueue {
    fn of<C: rdkafka::ClientContext>(client: &Client<C>) -> MainQueue {
        // SAFETY: the client pointer is valid while `client` lives; the returned handle (a new
        // reference to its main queue, never null) is released by `Drop`, before the client
        // (`PolledProducer`'s field order, and the serving thread is joined first).
        let q = unsafe { rdsys::rd_kafka_queue_get_main(client.native_ptr()) };
        assert!(!q.is_null(), "a client has a main queue");
        MainQueue(q)
    }

    fn len(&self) -> usize {
        // SAFETY: the handle is valid while `self` lives.
        unsafe { rdsys::rd_kafka_queue_length(self.0) }
    }
}

impl Drop for MainQueue {
    fn drop(&mut self) {
        // SAFETY: the handle came from `rd_kafka_queue_get_main` and is destroyed once.
        unsafe { rdsys::rd_kafka_queue_destroy(self.0) }
    }
}

unsafe extern "C" fn wake_cb(_: *mut rdsys::rd_kafka_t, opaque: *mut c_void) {
    // SAFETY: `opaque` points at the boxed callback `PolledProducer::wake` holds, which outlives
    // its registration (`Drop` unregisters it before freeing it).
    let f = opaque as *const Box<dyn Fn() + Send + Sync>;
    unsafe { (*f)() }
}

impl<C: ProducerContext + 'static> FromClientConfigAndContext<C> for PolledProducer<C> {
    /// A producer made from `config` with `context`, and the thread that serves its events.
    fn from_config_and_context(config: &ClientConfig, context: C) -> KafkaResult<Self> {
        let producer = Arc::new(BaseProducer::from_config_and_context(config, context)?);
        let queue = Arc::new(MainQueue::of(producer.client()));
        let stop = Arc::new(AtomicBool::new(false));
        let tid = Arc::new(AtomicI32::new(0));
        let thread = {
            let (producer, queue, stop) = (producer.clone(), queue.clone(), stop.clone());
            let tid = tid.clone();
            std::thread::Builder::new()
                .name("producer poller".into())
                .spawn(move || {
                    tid.store(thread_id(), Ordering::Relaxed);
                    serve(&producer, &queue, &stop)
                })
                .map_err(|e| {
                    KafkaError::ClientCreation(format!(
                        "cannot start a producer's serving thread: {e}"
                    ))
                })?
        };
        let t: Thread = thread.thread().clone();
        let wake: Box<Box<dyn Fn() + Send + Sync>> = Box::new(Box::new(move || t.unpark()));
        // SAFETY: the queue handle is valid; the callback box stays where it is until `Drop`
        // unregisters it.
        unsafe {
            rdsys::rd_kafka_queue_cb_event_enable(
                queue.0,
                Some(wake_cb),
                &*wake as *const Box<dyn Fn() + Send + Sync> as *mut c_void,
            )
        };
        // Anything queued before the callback was set is served at once.
        thread.thread().unpark();
        Ok(PolledProducer {
            poller: Some((thread, stop)),
            wake,
            queue,
            producer,
            tid,
        })
    }
}

#[cfg(target_os = "linux")]
fn thread_id() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

#[cfg(not(target_os = "linux"))]
fn thread_id() -> i32 {
    0
}

/// The serving thread: what the queue holds, then sleep until woken.
fn serve<C: ProducerContext>(producer: &BaseProducer<C>, queue: &MainQueue, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let mut served = 0;
        while queue.len() > 0 && served < MAX_SERVED_IN_A_ROW {
            // One event at most, without waiting (a zero deadline ends the poll's loop).
            producer.poll(Duration::ZERO);
            served += 1;
        }
        if served < MAX_SERVED_IN_A_ROW {
            std::thread::park_timeout(IDLE_POLL);
        }
    }
}

impl<C: ProducerContext + 'static> Deref for PolledProducer<C> {
    type Target = BaseProducer<C>;

    fn deref(&self) -> &BaseProducer<C> {
        &self.producer
    }
}

impl<C: ProducerContext + 'static> Drop for PolledProducer<C> {
    fn drop(&mut self) {
        if let Some((thread, stop)) = self.poller.take() {
            stop.store(true, Ordering::Relaxed);
            thread.thread().unpark();
            let _ = thread.join();
        }
        // SAFETY: the queue handle is valid; no callback runs after this returns, so the box
        // can go with the fields.
        unsafe { rdsys::rd_kafka_queue_cb_event_enable(self.queue.0, None, std::ptr::null_mut()) };
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::sync::mpsc::{channel, Sender};
    use std::sync::Mutex;
    use std::time::Instant;

    use rdkafka::message::DeliveryResult;
    use rdkafka::producer::{BaseRecord, Producer};
    use rdkafka::ClientContext;

    use super::*;

    struct Reports(Mutex<Sender<bool>>);

    impl ClientContext for Reports {}

    impl ProducerContext for Reports {
        type DeliveryOpaque = ();

        fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
            let _ = self.0.lock().unwrap().send(r.is_ok());
        }
    }

    /// CPU seconds thread `tid` of this process has used, or `None` once it is gone.
    fn thread_cpu(tid: i32) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
        let f: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks = f[11].parse::<f64>().ok()? + f[12].parse::<f64>().ok()?;
        // SAFETY: sysconf has no preconditions.
        Some(ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64)
    }

    // Every record's report is served, as it comes: the queue wakes the thread, which does not
    // wait for its 100 ms timeout; idle, the thread sleeps (rust-rdkafka's polling loop spins
    // through the last millisecond of every 100); dropped, it is joined.
    #[test]
    fn reports_are_served_as_they_come_and_an_idle_producer_sleeps() {
        // librdkafka's mock broker itself: this module sits below `admin`, which wraps it.
        let cluster = rdkafka::mocking::MockCluster::new(1).unwrap();
        cluster.create_topic("t", 1, 1).unwrap();
        let (tx, rx) = channel();
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", cluster.bootstrap_servers())
            .set("linger.ms", "0");
        let p = PolledProducer::from_config_and_context(&c, Reports(Mutex::new(tx))).unwrap();
        let mut took = Vec::new();
        for round in 0..21 {
            let t0 = Instant::now();
            p.send(BaseRecord::<(), _>::to("t").payload("x")).unwrap();
            assert!(
                rx.recv_timeout(Duration::from_secs(10)).unwrap(),
                "round {round}"
            );
            took.push(t0.elapsed());
        }
        took.sort();
        // Woken only by the timeout, half the reports would wait 50 ms or more.
        assert!(
            took[10] < Duration::from_millis(25),
            "median {:?}",
            took[10]
        );
        for _ in 0..1_000 {
            p.send(BaseRecord::<(), _>::to("t").payload("y")).unwrap();
        }
        p.flush(Duration::from_secs(10)).unwrap();
        assert_eq!(rx.try_iter().filter(|ok| *ok).count(), 1_000);
        let tid = p.tid.load(Ordering::Relaxed);
        let before = thread_cpu(tid).unwrap();
        std::thread::sleep(Duration::from_secs(3));
        let used = thread_cpu(tid).unwrap() - before;
        assert!(used <= 0.01, "the idle serving thread used {used} s in 3 s");
        drop(p);
        assert!(thread_cpu(tid).is_none(), "the serving thread was joined");
    }
}

//! The scheduling policy of librdkafka's threads (`kafka.batch_client_threads`).
//!
//! A client's threads (its main thread, one per broker, a producer's serving thread)
//! are made when the client is, and those threads make the rest; every thread inherits its
//! creator's policy. Made under Linux's `SCHED_BATCH`, a thread woken by a request, a fetch
//! response or a record to send does not preempt the thread that is deciding posts: it runs on
//! a free core, or once the running thread's time slice ends. On a backlog both stages'
//! threads are busy, and each wakeup that preempted them cost two context switches and their
//! caches (README, *Measured results*, Backlog). With an idle core, as on a live stream, a
//! woken thread runs at once either way.

/// Runs `make` (which creates librdkafka clients) with the calling thread under `SCHED_BATCH`
/// when `on`, then puts the calling thread back under the policy it had. Does nothing when the
/// thread is under any other policy than the default one (a real-time policy chosen by the
/// operator stays), or off Linux. A policy that cannot be set is logged and left.
pub fn batch_threads<T>(on: bool, make: impl FnOnce() -> T) -> T {
    let _batch = Batch(on && imp::enter_batch());
    make()
}

/// Puts the calling thread back under the default policy when dropped, if it left it (also
/// when `make` panics).
struct Batch(bool);

impl Drop for Batch {
    fn drop(&mut self) {
        if self.0 {
            imp::leave_batch();
        }
    }
}

#[cfg(target_os = "linux")]
mod imp {
    fn set(policy: libc::c_int) -> std::io::Result<()> {
        let param = libc::sched_param { sched_priority: 0 };
        // pid 0: the calling thread only (Linux schedules threads, not processes).
        // SAFETY: `param` is a valid `sched_param` that outlives the call, which only reads it.
        if unsafe { libc::sched_setscheduler(0, policy, &param) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// Whether the calling thread was under the default policy and is now under `SCHED_BATCH`.
    pub(super) fn enter_batch() -> bool {
        // SAFETY: no pointers; pid 0 names the calling thread.
        if unsafe { libc::sched_getscheduler(0) } != libc::SCHED_OTHER {
            return false;
        }
        match set(libc::SCHED_BATCH) {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(error = %e, "cannot make librdkafka's threads SCHED_BATCH");
                false
            }
        }
    }

    pub(super) fn leave_batch() {
        if let Err(e) = set(libc::SCHED_OTHER) {
            tracing::warn!(error = %e, "cannot put this thread back under SCHED_OTHER");
        }
    }

    /// The calling thread's policy (for tests).
    #[cfg(test)]
    pub(super) fn policy() -> libc::c_int {
        // SAFETY: no pointers; pid 0 names the calling thread.
        unsafe { libc::sched_getscheduler(0) }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    pub(super) fn enter_batch() -> bool {
        false
    }
    pub(super) fn leave_batch() {}
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// Threads made inside `batch_threads` run under SCHED_BATCH, the caller before and after
    /// under the default policy; with the setting off nothing changes.
    #[test]
    fn threads_made_inside_inherit_batch_and_the_caller_gets_its_policy_back() {
        std::thread::spawn(|| {
            assert_eq!(imp::policy(), libc::SCHED_OTHER);
            let inside = batch_threads(true, || std::thread::spawn(imp::policy).join().unwrap());
            assert_eq!(inside, libc::SCHED_BATCH);
            assert_eq!(imp::policy(), libc::SCHED_OTHER);
            let off = batch_threads(false, || std::thread::spawn(imp::policy).join().unwrap());
            assert_eq!(off, libc::SCHED_OTHER);
        })
        .join()
        .unwrap();
    }
}

//! The background tracker: it follows every unfinished task in the ledger until it is
//! completed or failed, so that long-polling clients and webhooks learn the outcome
//! without anybody polling.
//!
//! Each task is asked about at its provider's `poll_interval_ms`, growing by half at
//! each unchanged answer up to `[tracker] max_interval_ms`, with at most
//! `poll_max_in_flight` status requests to one provider at a time. A task is due again
//! an interval after it was due, not after its answer came, so that the tracker's own
//! delay does not stretch every interval. It looks a task up through the task service
//! ([`crate::lifecycle::TaskService::poll`]): a task a client asked about within the
//! poll cache interval is not asked about again, and what it learns wakes waiting
//! clients and announces finished tasks.
//!
//! Replicas share the tasks by following them (BENCHMARKS.md, "a replica's tasks
//! followed in memory"): a task's row names the replica that follows it
//! (`lease_owner`), and that replica keeps the task's schedule (due time, interval,
//! last status) in memory, so that an unchanged answer writes nothing; a changed
//! status or a failed request is written back at the next round, one statement for
//! all of them, and a task's end is the task service's one statement. A replica
//! proves it is alive by a heartbeat row, refreshed every quarter of `[tracker]
//! lease_ms`; it claims in batches the unfinished tasks nobody follows (new submits,
//! tasks given back) and those of a replica whose heartbeat expired (one killed), and
//! gives its own back, schedules and all, when it stops. A backlog is claimed batch
//! after batch only up to the replica's share of the unfinished tasks, so that the
//! replicas alive share it. A replica that finds its own heartbeat expired (the
//! ledger out of its reach for longer than `lease_ms`) forgets its tasks, whose rows
//! may be another's now, and starts again under a new name.
//!
//! A provider's status requests are sent from one of the serving threads (given to
//! providers in turn), where a request runs as a forwarded query does, on one thread
//! with that thread's upstream connections; on the gateway's own runtime, each woke
//! another of its threads several times.

use std::cmp::{Ordering as Order, Reverse};
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::Gateway;
use super::rounds::TICK;
use crate::lifecycle::TaskRef;
use crate::metrics::ProviderTracker;
use crate::snapshot::Snapshot;
use crate::tasks::ledger::{Ledger, Polled, TaskRecord, now_ms};
use crate::tasks::{MediaKind, TaskError, TaskState, TaskStatus};

/// Tasks claimed by one statement at most; when there were as many, the next
/// statement follows at the next round.
const CLAIM: i64 = 512;
/// Due tasks handed to the workers by one round at most.
const BATCH: usize = 256;
/// Tasks handed to the workers and not yet sent at most.
const AHEAD: usize = 4 * BATCH;
/// The shortest pause between two rounds: at 20,000 status requests a second, a
/// round hands out about 200.
const PAUSE: Duration = Duration::from_millis(10);
/// How often the tracked tasks are counted for the metrics.
const COUNT_EVERY: Duration = Duration::from_secs(5);

/// Follow unfinished tasks until the gateway stops, sending the status requests on
/// the `workers` (or here, when there are none); then give them back.
pub async fn run(gateway: Arc<Gateway>, workers: Vec<Handle>) {
    let Some(ledger) = gateway.tasks.ledger().cloned() else {
        return;
    };
    let now = Instant::now();
    let mut tracker = Tracker {
        me: gateway.replica.clone(),
        gateway: gateway.clone(),
        ledger,
        workers,
        ahead: Arc::new(Semaphore::new(AHEAD)),
        in_flight: HashMap::new(),
        schedule: BinaryHeap::new(),
        names: HashMap::new(),
        generation: Arc::new(AtomicU64::new(0)),
        alive: false,
        beat_due: now,
        look_due: now,
        orphans: true,
        more: false,
        changed: Vec::new(),
        count_due: now,
        counted: Vec::new(),
        answered: Arc::default(),
    };
    while !gateway.is_draining() {
        let pause = tracker.round().await;
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = gateway.stopped() => {}
        }
    }
    tracker.give_back().await;
}

/// A task this replica follows: what a status request needs, and its schedule. Kept
/// small (about 90 bytes and its upstream id): 100,000 of them are held at once.
struct Followed {
    row: i64,
    /// Shared by every task of the provider, and of the model.
    provider: Arc<str>,
    model: Arc<str>,
    upstream_id: Box<str>,
    kind: MediaKind,
    created_ms: i64,
    /// The status last known (written in the ledger).
    status: TaskStatus,
    /// When it is asked about next, and the interval that made it (0: none yet).
    due_ms: i64,
    interval_ms: i64,
    /// When it was last known unfinished: the last answer, or its submit.
    known_ms: i64,
}

impl Followed {
    /// A claimed row, with the schedule stored in it; `names` holds one copy of each
    /// provider's and model's name for all their tasks.
    fn of(row: TaskRecord, names: &mut HashMap<String, Arc<str>>) -> Option<Self> {
        let (Some(provider), Some(upstream_id)) = (row.provider, row.upstream_id) else {
            return None;
        };
        let mut name = |name: String| {
            names
                .entry(name)
                .or_insert_with_key(|name| Arc::from(name.as_str()))
                .clone()
        };
        Some(Self {
            row: row.id,
            provider: name(provider),
            model: name(row.model),
            upstream_id: upstream_id.into_boxed_str(),
            kind: row.kind,
            created_ms: row.created_ms,
            status: last_status(row.status),
            due_ms: row.next_poll_ms.unwrap_or_else(now_ms),
            interval_ms: row.poll_interval_ms.unwrap_or(0),
            known_ms: row.updated_ms,
        })
    }

    /// Its schedule and status, as the ledger keeps them.
    fn polled(&self) -> Polled {
        Polled {
            row: self.row,
            status: self.status,
            next_ms: self.due_ms,
            interval_ms: self.interval_ms,
            answered_ms: self.known_ms,
        }
    }
}

/// The schedule's order: the earliest due first (then by row, so that no two are
/// equal).
impl Ord for Followed {
    fn cmp(&self, other: &Self) -> Order {
        (self.due_ms, self.row).cmp(&(other.due_ms, other.row))
    }
}

impl PartialOrd for Followed {
    fn partial_cmp(&self, other: &Self) -> Option<Order> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Followed {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Order::Equal
    }
}

impl Eq for Followed {}

/// The tracker's state: its name on the ledger, where status requests are sent
/// from, the schedule of the tasks it follows, and what their answers taught.
struct Tracker {
    gateway: Arc<Gateway>,
    ledger: Arc<Ledger>,
    /// This replica's name as a follower: the gateway's, and a new one each time its
    /// heartbeat was found expired.
    me: String,
    workers: Vec<Handle>,
    ahead: Arc<Semaphore>,
    in_flight: HashMap<String, Slots>,
    /// The tasks followed and not being asked about now, the earliest due on top (a
    /// heap: one array, where a tree's nodes cost twice the tasks' own size).
    schedule: BinaryHeap<Reverse<Followed>>,
    /// Providers' and models' names, one copy each.
    names: HashMap<String, Arc<str>>,
    /// Bumped when the tasks followed are forgotten: answers of an older one are
    /// dropped.
    generation: Arc<AtomicU64>,
    /// Whether `me`'s heartbeat is in the ledger and holds.
    alive: bool,
    /// When the heartbeat is written next, and when the ledger is looked at next for
    /// new tasks (and written what changed).
    beat_due: Instant,
    look_due: Instant,
    /// Whether to look for a dead replica's tasks (after each heartbeat, and while
    /// claims of them come full), and whether the last claim came full.
    orphans: bool,
    more: bool,
    /// What the answers taught that is to be written back.
    changed: Vec<Polled>,
    /// When the tracked tasks are counted next, and the providers counted last.
    count_due: Instant,
    counted: Vec<String>,
    /// The tasks asked about since the last round, back from the workers: `None`
    /// when a task ended (or was given up).
    answered: Arc<Mutex<Vec<Answered>>>,
}

/// `provider`'s `poll_max_in_flight` in `snapshot`; 1 for a provider no longer there
/// (its tasks still followed are asked about one at a time).
fn max_in_flight(snapshot: &Snapshot, provider: &str) -> usize {
    snapshot
        .providers
        .get(provider)
        .map_or(1, |p| p.poll_max_in_flight())
}

/// A task back from its status request, with the generation it was sent in.
struct Answered {
    generation: u64,
    task: Option<(Followed, Write)>,
}

/// Whether what a status request taught is written back.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Write {
    /// Unchanged: kept in memory alone.
    No,
    /// The status changed, or the request failed.
    Yes,
}

/// A provider's `poll_max_in_flight`, and the worker its status requests are sent
/// from: one per provider, so that its requests in flight share one thread's wake-ups
/// and connections.
#[derive(Clone)]
struct Slots {
    slots: Arc<Semaphore>,
    /// The `poll_max_in_flight` the slots stand for (a reload may change it).
    limit: usize,
    worker: usize,
    metrics: Arc<ProviderTracker>,
}

/// A due task waiting for a slot: its provider's slots, and its place among the
/// tasks handed out ahead.
struct Due {
    task: Followed,
    slots: Arc<Semaphore>,
    metrics: Arc<ProviderTracker>,
    held: OwnedSemaphorePermit,
}

impl Tracker {
    /// One round: the heartbeat when due; the answers back into the schedule; every
    /// [`TICK`] (or at once after a full claim, while below its share), what changed
    /// written back and new tasks claimed; the due tasks handed to the workers. The
    /// pause until the next.
    async fn round(&mut self) -> Duration {
        let snapshot = self.gateway.snapshot();
        let settings = snapshot.tracker.clone();
        if !settings.enabled {
            return TICK;
        }
        self.follow_limits(&snapshot);
        let lease = Duration::from_millis(settings.lease_ms);
        let now = Instant::now();
        if now >= self.beat_due {
            self.beat_due = now + (lease / 4).max(PAUSE);
            self.beat(lease).await;
        }
        self.take_answers();
        if self.alive && (now >= self.look_due || self.more) {
            self.look_due = now + TICK;
            self.look().await;
        }
        self.count().await;
        self.hand_out();
        // Only a replica alive claims: one whose heartbeat cannot be written waits a
        // round, rather than asking again at once for what it may not claim.
        if self.more && self.alive {
            return Duration::ZERO;
        }
        let next = self
            .schedule
            .peek()
            .map_or(i64::MAX, |first| first.0.due_ms);
        let wait =
            Duration::from_millis((next - now_ms()).clamp(0, TICK.as_millis() as i64) as u64);
        wait.max(PAUSE)
    }

    /// The heartbeat: `me` alive for `lease` more. When it had expired, the tasks
    /// followed may be another replica's already: forgotten, and `me` starts again
    /// under a new name.
    async fn beat(&mut self, lease: Duration) {
        let metrics = &self.gateway.metrics.tracker;
        metrics.statement("heartbeat");
        if self.alive {
            match self.ledger.heartbeat(&self.me, lease).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(replica = %self.me, tasks = self.schedule.len(), "tracker: this replica's heartbeat had expired; its tasks are left to the others");
                    let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
                    self.me = format!("{}.{generation}", self.gateway.replica);
                    self.schedule.clear();
                    self.changed.clear();
                    self.alive = false;
                }
                Err(e) => {
                    self.gateway.metrics.ledger_errors.inc();
                    tracing::warn!(error = %e, "tracker: the heartbeat cannot be written");
                }
            }
        }
        if !self.alive {
            match self.ledger.register(&self.me, lease).await {
                Ok(()) => self.alive = true,
                Err(e) => {
                    self.gateway.metrics.ledger_errors.inc();
                    tracing::warn!(error = %e, "tracker: the heartbeat cannot be written");
                }
            }
        }
        self.orphans = true;
    }

    /// The answers back from the workers: each task back in the schedule, what is to
    /// be written noted; a task that ended leaves.
    fn take_answers(&mut self) {
        let answered = std::mem::take(&mut *lock(&self.answered));
        let generation = self.generation.load(Ordering::Relaxed);
        for a in answered {
            let Some((task, write)) = a.task else {
                continue;
            };
            if a.generation != generation {
                continue;
            }
            if write == Write::Yes {
                self.changed.push(task.polled());
            }
            self.schedule.push(Reverse(task));
        }
    }

    /// What changed written back, and tasks claimed: a dead replica's first (after a
    /// heartbeat), then new ones. On SQLite, both reach the writer at once: one
    /// transaction.
    async fn look(&mut self) {
        let changed = std::mem::take(&mut self.changed);
        let (ledger, me) = (self.ledger.clone(), self.me.clone());
        let orphans = self.orphans;
        let metrics = &self.gateway.metrics.tracker;
        let write_back = async {
            for chunk in changed.chunks(CLAIM as usize) {
                metrics.statement("polled");
                if let Err(e) = ledger.polled(&me, chunk).await {
                    self.gateway.metrics.ledger_errors.inc();
                    tracing::warn!(tasks = chunk.len(), error = %e, "tracker: the ledger cannot be written");
                }
            }
        };
        let claim = async {
            metrics.statement("lease");
            let claimed = match orphans {
                true => ledger.follow_orphans(&me, CLAIM).await,
                false => ledger.follow_new(&me, CLAIM).await,
            };
            claimed.unwrap_or_else(|e| {
                self.gateway.metrics.ledger_errors.inc();
                tracing::warn!(error = %e, "tracker: the ledger cannot be read");
                Vec::new()
            })
        };
        let ((), claimed) = tokio::join!(write_back, claim);
        let full = claimed.len() as i64 == CLAIM;
        if orphans && !full {
            // Every dead replica's tasks have a follower: its heartbeat goes.
            self.orphans = false;
            metrics.statement("heartbeat");
            if let Err(e) = self.ledger.forget_dead().await {
                self.gateway.metrics.ledger_errors.inc();
                tracing::warn!(error = %e, "tracker: the ledger cannot be written");
            }
            metrics.statement("heartbeat");
            match self.ledger.release_unknown().await {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(
                        tasks = n,
                        "tracker: tasks followed under an unknown name given back"
                    );
                }
                Err(e) => {
                    self.gateway.metrics.ledger_errors.inc();
                    tracing::warn!(error = %e, "tracker: the ledger cannot be written");
                }
            }
        }
        // Looking for orphans first, new tasks at once after.
        self.more = full || orphans;
        for row in claimed {
            if let Some(task) = Followed::of(row, &mut self.names) {
                self.schedule.push(Reverse(task));
            }
        }
        if full && self.ledger.shared() && self.has_its_share().await {
            // The others alive claim the rest; this one takes a batch a round.
            self.more = false;
        }
    }

    /// The tasks out of the schedule now: handed to the workers and not sent yet,
    /// being asked about, or answered and not taken back yet.
    fn out(&self) -> usize {
        let ahead = AHEAD.saturating_sub(self.ahead.available_permits());
        let in_flight: usize = self
            .in_flight
            .values()
            .map(|s| s.limit.saturating_sub(s.slots.available_permits()))
            .sum();
        ahead + in_flight + lock(&self.answered).len()
    }

    /// Whether this replica follows its share of the unfinished tasks (their number
    /// over the replicas alive) or more. Asked only when a claim came full, so that
    /// a backlog (a dead replica's tasks, those given back by a rolling restart) is
    /// shared among the replicas rather than taken by the first to look, batch
    /// after batch, while the others' status requests stay idle; in a steady
    /// state, no claim comes full and nothing is counted.
    async fn has_its_share(&self) -> bool {
        self.gateway.metrics.tracker.statement("lease");
        match self.ledger.fair_share().await {
            Ok(share) => (self.schedule.len() + self.out()) as i64 >= share,
            Err(e) => {
                self.gateway.metrics.ledger_errors.inc();
                tracing::warn!(error = %e, "tracker: the ledger cannot be read");
                false
            }
        }
    }

    /// Hand the due tasks to the workers, as many as there is room for ahead of the
    /// status requests, in the order due.
    fn hand_out(&mut self) {
        let now = now_ms();
        let mut shares: Vec<Vec<Due>> = Vec::new();
        for _ in 0..BATCH {
            if self
                .schedule
                .peek()
                .is_none_or(|first| first.0.due_ms > now)
            {
                break;
            }
            let Ok(held) = self.ahead.clone().try_acquire_owned() else {
                break;
            };
            let Some(Reverse(task)) = self.schedule.pop() else {
                break;
            };
            let Slots {
                slots,
                worker,
                metrics,
                ..
            } = self.slots(&task.provider);
            if shares.len() <= worker {
                shares.resize_with(worker + 1, Vec::new);
            }
            shares[worker].push(Due {
                task,
                slots,
                metrics,
                held,
            });
        }
        for (worker, share) in shares.into_iter().enumerate() {
            self.send(worker, share);
        }
    }

    /// The slots of `provider`, and its worker: providers are given the workers in
    /// turn, as they are first seen.
    fn slots(&mut self, provider: &str) -> Slots {
        if let Some(slots) = self.in_flight.get(provider) {
            return slots.clone();
        }
        let limit = max_in_flight(&self.gateway.snapshot(), provider);
        let slots = Slots {
            slots: Arc::new(Semaphore::new(limit)),
            limit,
            worker: self.in_flight.len() % self.workers.len().max(1),
            metrics: Arc::new(self.gateway.metrics.tracker.of_provider(provider)),
        };
        self.in_flight.insert(provider.to_string(), slots.clone());
        slots
    }

    /// Each provider's slots to its `poll_max_in_flight` as the routes now say: more
    /// are free at once; fewer as soon as the requests in flight beyond the new limit
    /// are answered (the slots taken back are held by a task until then, so that no
    /// request is cut short).
    fn follow_limits(&mut self, snapshot: &Snapshot) {
        for (provider, slots) in &mut self.in_flight {
            let limit = max_in_flight(snapshot, provider);
            if limit > slots.limit {
                slots.slots.add_permits(limit - slots.limit);
            } else if limit < slots.limit {
                let fewer = u32::try_from(slots.limit - limit).unwrap_or(u32::MAX);
                let semaphore = slots.slots.clone();
                tokio::spawn(async move {
                    if let Ok(taken) = semaphore.acquire_many_owned(fewer).await {
                        taken.forget();
                    }
                });
            }
            slots.limit = limit;
        }
    }

    /// Hand `batch` to `worker`: it sends each status request once its provider has
    /// a slot free, in the order due.
    fn send(&self, worker: usize, batch: Vec<Due>) {
        if batch.is_empty() {
            return;
        }
        let (gateway, answered) = (self.gateway.clone(), self.answered.clone());
        let current = self.generation.clone();
        let generation = current.load(Ordering::Relaxed);
        let sending = async move {
            for due in batch {
                let Ok(slot) = due.slots.acquire_owned().await else {
                    continue;
                };
                drop(due.held);
                // Tasks forgotten while this one waited (the heartbeat had expired)
                // may be another replica's now.
                if current.load(Ordering::Relaxed) != generation {
                    continue;
                }
                let (gateway, answered) = (gateway.clone(), answered.clone());
                tokio::spawn(async move {
                    let task = poll(&gateway, &due.metrics, due.task).await;
                    // The slot is the provider's: the tracker's round does not hold it.
                    drop(slot);
                    lock(&answered).push(Answered { generation, task });
                });
            }
        };
        match self.workers.get(worker) {
            Some(worker) => drop(worker.spawn(sending)),
            None => drop(tokio::spawn(sending)),
        }
    }

    /// The gateway stops: every task followed given back with its schedule, so that
    /// another replica (or the next process) goes on with it at once.
    async fn give_back(&mut self) {
        if !self.alive {
            return;
        }
        self.take_answers();
        let mut tasks: Vec<Polled> = self.schedule.iter().map(|t| t.0.polled()).collect();
        // What changed and was not written yet, of tasks being asked about now.
        let scheduled: HashSet<i64> = self.schedule.iter().map(|t| t.0.row).collect();
        let changed = std::mem::take(&mut self.changed);
        tasks.extend(changed.into_iter().filter(|p| !scheduled.contains(&p.row)));
        self.gateway.metrics.tracker.statement("give_back");
        if let Err(e) = self.ledger.give_back(&self.me, &tasks).await {
            self.gateway.metrics.ledger_errors.inc();
            tracing::warn!(tasks = tasks.len(), error = %e, "tracker: the tasks followed cannot be given back; they are followed again once this replica's heartbeat expires");
        }
    }

    /// Every few seconds: the unfinished tasks per provider (the ledger's, whoever
    /// follows them) and how late the most overdue status request of those this
    /// replica follows is, for the metrics. A provider counted before and not now has
    /// none left.
    async fn count(&mut self) {
        if Instant::now() < self.count_due {
            return;
        }
        self.count_due = Instant::now() + COUNT_EVERY;
        let metrics = &self.gateway.metrics.tracker;
        metrics.statement("count");
        let tracked = match self.ledger.tracked().await {
            Ok(tracked) => tracked,
            Err(e) => {
                self.gateway.metrics.ledger_errors.inc();
                tracing::warn!(error = %e, "tracker: the tracked tasks cannot be counted");
                return;
            }
        };
        let now = now_ms();
        // Each provider's most overdue task: a look at every task followed, every
        // few seconds.
        let mut late: HashMap<&str, i64> = HashMap::new();
        for Reverse(task) in &self.schedule {
            let by = now - task.due_ms;
            if by > 0 {
                let most = late.entry(&task.provider).or_insert(by);
                *most = (*most).max(by);
            }
        }
        for t in &tracked {
            let late = late.get(t.provider.as_str()).copied().unwrap_or(0);
            metrics.tracked(&t.provider, t.tasks, millis(late));
        }
        for gone in &self.counted {
            if !tracked.iter().any(|t| &t.provider == gone) {
                metrics.tracked(gone, 0, Duration::ZERO);
            }
        }
        self.counted = tracked.into_iter().map(|t| t.provider).collect();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Ask about one followed task: the task back with its next status request, and
/// whether that is to be written; `None` when it ended.
async fn poll(
    gateway: &Gateway,
    metrics: &ProviderTracker,
    mut task: Followed,
) -> Option<(Followed, Write)> {
    let snapshot = gateway.snapshot();
    let max_age = Duration::from_secs(snapshot.tracker.max_age_hours.saturating_mul(3600));
    let of = TaskRef {
        provider: &task.provider,
        upstream_id: &task.upstream_id,
        model: &task.model,
        kind: task.kind,
    };
    if now_ms() - task.created_ms > max_age.as_millis() as i64 {
        if gateway.tasks.give_up(&snapshot, of, expired()).await {
            return None;
        }
        // The ledger did not take the end: it is tried again later.
        task.due_ms = now_ms() + snapshot.tracker.max_interval_ms as i64;
        return Some((task, Write::No));
    }
    let Some(provider) = snapshot.providers.get(&*task.provider) else {
        // The provider left the configuration; look again later, it may come back.
        task.due_ms = now_ms() + snapshot.tracker.max_interval_ms as i64;
        return Some((task, Write::No));
    };
    let sent = now_ms();
    let due = task.due_ms;
    metrics.poll_sent(millis(sent - due));
    let (status, write) = match gateway.tasks.poll(&snapshot, of).await {
        Ok(found) => {
            let status = found.state.status;
            // Answered by the results cache: no status request was made.
            if found.upstream_time.is_some() {
                metrics.status_request(outcome(status));
                if status.is_terminal() {
                    let gap = now_ms() - task.known_ms;
                    metrics.seen_finished(millis(gap));
                }
            }
            if status.is_terminal() {
                if found.recorded {
                    return None;
                }
                // The ledger did not take the end: the task is asked about again
                // later (the answer was not kept), and its end written again.
                ask_again(&mut task, due, provider.poll_interval(), &snapshot.tracker);
                return Some((task, Write::No));
            }
            let write = if status == task.status {
                Write::No
            } else {
                Write::Yes
            };
            (status, write)
        }
        Err(e) => {
            metrics.status_request("error");
            tracing::debug!(provider = %task.provider, code = e.code, "tracker: status request failed");
            ask_again(&mut task, due, provider.poll_interval(), &snapshot.tracker);
            return Some((task, Write::Yes));
        }
    };
    let interval = next_interval(&task, status, provider.poll_interval(), &snapshot.tracker);
    let next = Polled::answered(task.row, status, due, interval);
    task.status = status;
    task.due_ms = next.next_ms;
    task.interval_ms = next.interval_ms;
    task.known_ms = next.answered_ms;
    Some((task, write))
}

/// Nothing learned of `task` (its status request failed, or the end it brought was
/// not recorded): asked about again after its next interval, its status and when it
/// was last known unfinished as they were.
fn ask_again(
    task: &mut Followed,
    due: i64,
    base: Duration,
    settings: &crate::config::TrackerConfig,
) {
    let interval = next_interval(task, task.status, base, settings);
    let next = Polled::answered(task.row, task.status, due, interval);
    task.due_ms = next.next_ms;
    task.interval_ms = next.interval_ms;
}

/// The provider's interval again after a change; otherwise half as long again, up to
/// the configured maximum.
fn next_interval(
    task: &Followed,
    status: TaskStatus,
    base: Duration,
    settings: &crate::config::TrackerConfig,
) -> Duration {
    let max = Duration::from_millis(settings.max_interval_ms).max(base);
    let unchanged = task.status == status;
    match task.interval_ms {
        ms if ms > 0 && unchanged => (Duration::from_millis(ms as u64) * 3 / 2).clamp(base, max),
        _ => base,
    }
}

/// A status request's outcome, as the metrics name it.
fn outcome(status: TaskStatus) -> &'static str {
    match status {
        TaskStatus::Completed => "completed",
        TaskStatus::Failed => "failed",
        TaskStatus::Queued | TaskStatus::Processing => "unfinished",
    }
}

/// A span of milliseconds, none when negative (clocks of replicas differ).
fn millis(ms: i64) -> Duration {
    Duration::from_millis(ms.max(0) as u64)
}

fn last_status(status: Option<TaskStatus>) -> TaskStatus {
    match status {
        Some(TaskStatus::Processing) => TaskStatus::Processing,
        _ => TaskStatus::Queued,
    }
}

/// What a task that never finished within `max_age_hours` becomes.
fn expired() -> TaskState {
    TaskState {
        status: TaskStatus::Failed,
        progress: None,
        urls: Vec::new(),
        error: Some(TaskError {
            code: "tracking_expired".into(),
            message: "the task did not finish within the time the gateway follows tasks".into(),
        }),
    }
}

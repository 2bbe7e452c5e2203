//! Each backend's `Executor`: a pool of workers (children or wasm instances) activations queue for. An activation is admitted (`admission`), takes a worker (`lifecycle`), runs, closes its logs (`ending`, with its report: `reports`), and gives the worker back.

mod admission;
mod ending;
mod lifecycle;
mod reports;
mod worker;

use std::future::Future;
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use bytes::Bytes;
use tokio::time::Instant;

pub use ending::{Close, End};
use lifecycle::Idle;
pub use reports::Reporting;
pub use worker::{Job, NO_REQUESTS, PoolSize, Start, Worker};

use super::report::cpu_timed;
use super::{
    AbortOnDrop, ActivateFuture, Activation, Answer, Executor, HttpRequest, HttpResponse, Outcome,
    Payload, Respond, RunError, lines,
};
use crate::context::Context;
use crate::lock;

/// What a job ended with: its result line, read once (none for a request served as it
/// came, whose response has gone out).
type Ended = Result<Option<lines::ResultLine>, RunError>;

/// What an activation leaves to its end: the permit it holds until then, whether its
/// worker has written the end already, and what its report and lines need: when it began
/// (taken only for a report) and its labels (only in json).
#[derive(Default)]
struct InFlight {
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    written: bool,
    began: Option<std::time::Instant>,
    labels: Option<Arc<crate::logs::Labels>>,
}

/// Up to `workers` workers of one action, made on demand; activations beyond that wait
/// in arrival order (tokio's semaphore is fair), up to `max_waiting` of them.
pub struct Pool<W: Worker> {
    /// What new workers are made from; `upgrade` replaces it.
    spec: RwLock<Arc<W::Spec>>,
    /// Bumped with each new spec.
    generation: AtomicU64,
    size: PoolSize,
    reporting: Reporting,
    /// One per worker that may exist: held by each activation until it has ended, and by
    /// the making of a retired worker's successor until that is idle.
    permits: Arc<tokio::sync::Semaphore>,
    /// The pool itself, for the tasks that make successors.
    me: Weak<Pool<W>>,
    /// Workers not serving anyone right now.
    idle: Mutex<Vec<Idle<W>>>,
    waiting: AtomicUsize,
    /// A task that works for this slot (compiling a wasm module's optimized code), stopped
    /// when the slot goes.
    helper: std::sync::OnceLock<AbortOnDrop>,
    /// Set by `stop`: every activation under way ends, dropping its worker.
    stopping: tokio::sync::watch::Sender<bool>,
    /// How long the action's start took, until the first activation's report says it.
    cold: Mutex<Option<std::time::Duration>>,
}

/// Whole microseconds, for the debug lines that time workers.
fn micros(time: std::time::Duration) -> u64 {
    u64::try_from(time.as_micros()).unwrap_or(u64::MAX)
}

/// Runs `future` until `deadline` (if any); running out of time is `RunError::TimedOut`.
async fn within<T>(
    deadline: Option<Instant>,
    future: impl Future<Output = Result<T, RunError>>,
) -> Result<T, RunError> {
    match deadline {
        Some(at) => tokio::time::timeout_at(at, future)
            .await
            .unwrap_or(Err(RunError::TimedOut)),
        None => future.await,
    }
}

impl<W: Worker> Executor for Pool<W>
where
    W::Spec: 'static,
{
    fn activate(&self, activation: Activation, deadline: Option<Instant>) -> ActivateFuture<'_> {
        Box::pin(async move {
            let Activation { context, payload } = activation;
            let job = match payload {
                Payload::Line(line) => Job::Line { line, context },
                Payload::Value(value) => Job::Value { value, context },
                Payload::Request(request) => {
                    let response = self.serve(request, context, deadline).await?;
                    let outcome = Outcome::answered(false, response.status().as_u16());
                    return Ok(Answer::Response { response, outcome });
                }
            };
            let (line, outcome) = self.job(job, deadline).await?;
            Ok(Answer::Line { line, outcome })
        })
    }

    fn takes_requests(&self) -> bool {
        W::TAKES_REQUESTS
    }

    fn started_in(&self, took: std::time::Duration) {
        if self.reporting.reports {
            *lock(&self.cold) = Some(took);
        }
    }

    fn abandon(&self) {
        self.stopping.send_replace(true);
    }

    fn stop(&self) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            self.stopping.send_replace(true);
            drop(std::mem::take(&mut *lock(&self.idle)));
            // Each activation holds a permit until it has dropped its worker.
            let all = u32::try_from(self.size.workers.max(1)).unwrap_or(u32::MAX);
            let _ = self.permits.acquire_many(all).await;
            self.permits.close();
            drop(std::mem::take(&mut *lock(&self.idle)));
        })
    }
}

impl<W: Worker> Pool<W> {
    /// A request as it came: answered as soon as the response's head is there, while a
    /// task of its own holds the worker until the body has gone out.
    async fn serve(
        &self,
        request: Box<HttpRequest>,
        context: Arc<Context>,
        deadline: Option<Instant>,
    ) -> Result<HttpResponse, RunError> {
        if !W::TAKES_REQUESTS {
            return Err(RunError::BadInput(worker::NO_REQUESTS.to_owned()));
        }
        let pool = self.me.upgrade().ok_or(RunError::Stopped)?;
        let (respond, head) = Respond::new();
        // The activation goes on once the head is out, until the worker has written
        // the body: a task of its own holds the worker until then.
        let job = Job::Request {
            request,
            context,
            respond,
        };
        let task = tokio::spawn(async move { pool.job(job, deadline).await });
        match head.await {
            Ok(response) => Ok(response),
            Err(_) => match task.await {
                Ok(Err(e)) => Err(e),
                Ok(Ok(_)) => Err(RunError::Exited(Some(
                    "it ended the activation without a response".to_owned(),
                ))),
                Err(panicked) => {
                    tracing::error!(error = %panicked, "an activation panicked");
                    self.reporting.end.write();
                    Err(RunError::Exited(Some("the activation failed".to_owned())))
                }
            },
        }
    }

    /// One activation of any kind, ended (its logs marked) before the next may start: its
    /// result line (empty for a request served as it came) and how it went.
    async fn job(&self, job: Job, deadline: Option<Instant>) -> Result<(Bytes, Outcome), RunError> {
        let mut stopping = self.stopping.subscribe();
        let head_sent = match &job {
            Job::Request { respond, .. } => Some(respond.head_sent()),
            Job::Line { .. } | Job::Value { .. } => None,
        };
        // Read only for the activation's report.
        let began = self.reporting.reports.then(std::time::Instant::now);
        let labels = self
            .reporting
            .format
            .is_json()
            .then(|| Arc::new(job.context().labels()));
        let mut in_flight = InFlight {
            began,
            labels: labels.clone(),
            ..InFlight::default()
        };
        let result = tokio::select! {
            // First, so that an activation that starts after `stop` starts no worker.
            biased;
            // Dropping the activation drops its worker: the child or instance ends.
            _ = stopping.wait_for(|stop| *stop) => {
                let sent = head_sent.as_ref().map_or(0, |sent| sent.load(Ordering::Acquire));
                self.say_stopped(began, sent, labels.as_deref());
                Err(RunError::Stopped)
            }
            result = self.carry_out(job, deadline, head_sent.as_deref(), &mut in_flight) => result,
        };
        if !in_flight.written {
            self.reporting.end.write();
        }
        // Only now may the next activation start on these workers.
        drop(in_flight);
        result
    }

    /// A line of the runtime's about `worker`'s activation: under its labels in JSON.
    fn say_about(&self, worker: &W, message: &str) {
        match worker.attribution() {
            Some(attribution) => attribution.say(message),
            None => crate::logs::runtime_line(self.reporting.format, None, message),
        }
    }

    /// One activation on a worker: admitted, it takes a worker, runs on it, closes its
    /// logs and gives the worker back. `head_sent`, for a request served as it came, is
    /// set once its response's head went out (a failure after that is told as a cut).
    async fn carry_out(
        &self,
        job: Job,
        deadline: Option<Instant>,
        head_sent: Option<&AtomicU16>,
        in_flight: &mut InFlight,
    ) -> Result<(Bytes, Outcome), RunError> {
        in_flight.permit = Some(self.admit(deadline).await?);
        // Owned by this activation until it ends: were it cancelled, the worker goes with it.
        let mut entry = self.take(job.context(), deadline).await?;
        let instance = entry.instance_use();
        let worker = &mut entry.worker;
        self.hand_over(worker, in_flight);
        let reports = self.reporting.reports;
        let cpu_before = if reports { worker.cpu_time() } else { None };
        let mut polled = std::time::Duration::ZERO;
        // A request served as it came has sent its response by the end; the others'
        // answer is a result line.
        let answers_a_line = !matches!(job, Job::Request { .. });
        let work = async {
            // Boxed: a worker's activation is a deep state machine (a component's call
            // holds wasmtime's), and inline it made every future around it as large, each
            // moved whole as the activation went through tokio (a spawn, its stages, the
            // timeout): a profile of a kept HTTP component's hello found those copies.
            let answered = Box::pin(worker.activate(job)).await?;
            if answers_a_line {
                lines::check_result(answered).map(Some)
            } else {
                Ok(None)
            }
        };
        let result: Ended = within(deadline, cpu_timed(work, &mut polled, reports)).await;
        let sent = head_sent.map_or(0, |sent| sent.load(Ordering::Acquire));
        self.explain(worker, &result, sent);
        let verdict = self.verdict(&result, sent);
        let outcome = verdict.outcome;
        let close = match in_flight.began {
            Some(began) => {
                // A child's own clock where it has one; an instance ran inside the polls.
                let cpu = match cpu_before {
                    Some(before) => worker.cpu_time().map(|after| after.saturating_sub(before)),
                    None => W::CPU_KNOWN.then_some(polled),
                };
                self.closed_with_report(worker, verdict, began.elapsed(), cpu, instance)
            }
            None => Close::from(self.reporting.end),
        };
        worker.end_activation(close);
        in_flight.written = true;
        self.give_back(entry, &result, &mut in_flight.permit);
        let line = result?.map_or_else(Bytes::new, |read| read.line);
        Ok((line, outcome))
    }

    /// Readies `worker` for an activation: output it left since the last one is said
    /// (under that one's labels: this one's are not given yet), it is told whether others
    /// wait, and given this one's labels.
    fn hand_over(&self, worker: &mut W, in_flight: &mut InFlight) {
        if let Some(stray) = worker.discard_stray_output() {
            let say = |m: &str| self.say_about(worker, m);
            lines::report_stray(&say, &stray);
        }
        worker.others_queued(self.waiting.load(Ordering::Relaxed) > 0);
        if let Some(labels) = in_flight.labels.take() {
            worker.attribute(labels);
        }
    }

    /// Explains a failed activation among its logs. OpenWhisk's runtime tests expect
    /// nothing on stderr but what the action wrote when it answers a JSON value that is not
    /// an object: that explanation is for those who asked for hints. A line that is no JSON
    /// at all (a print on the result channel) no canonical case sends, and without a word
    /// the 502 would leave its author guessing. A response already under way (`sent`) was
    /// cut: the client saw its body end, and this says why.
    fn explain(&self, worker: &W, result: &Ended, sent: u16) {
        let hints = self.reporting.hints;
        match result {
            Err(e) if sent != 0 => self.say_about(
                worker,
                &format!("wasmloop: the response was cut short: {e}"),
            ),
            Err(RunError::NotJson(line)) => {
                lines::report_not_json(&|m| self.say_about(worker, m), line, hints)
            }
            Err(RunError::NotAnObject(line)) if hints => {
                lines::report_not_an_object(&|m| self.say_about(worker, m), line)
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::StartError;

    /// A worker that answers with the id of the spec it was made from, and exits when
    /// asked to.
    struct Fake(u32);

    struct FakeSpec {
        id: u32,
        starts: bool,
    }

    impl Worker for Fake {
        type Spec = FakeSpec;

        async fn start(spec: &FakeSpec, _: Start<'_>) -> Result<Self, StartError> {
            if spec.starts {
                Ok(Fake(spec.id))
            } else {
                Err(StartError::Exited(None))
            }
        }

        fn is_alive(&mut self) -> bool {
            true
        }

        fn discard_stray_output(&mut self) -> Option<Bytes> {
            None
        }

        async fn activate(&mut self, job: Job) -> Result<Bytes, RunError> {
            let (line, _) = job.into_line()?;
            if line == b"exit\n" {
                return Err(RunError::Exited(None));
            }
            Ok(Bytes::from(format!("{{\"spec\":{}}}\n", self.0)))
        }
    }

    /// An activation whose request line is `line`.
    fn line(line: &[u8]) -> Activation {
        Activation {
            context: Arc::default(),
            payload: Payload::Line(line.to_vec()),
        }
    }

    /// The result line a pool answers `{}` with.
    async fn answer<W: Worker>(slot: &Pool<W>) -> String
    where
        W::Spec: 'static,
    {
        let answer = slot
            .activate(line(b"{}\n"), None)
            .await
            .and_then(Answer::into_line)
            .unwrap()
            .0;
        String::from_utf8(answer.to_vec()).unwrap()
    }

    fn spec(id: u32) -> FakeSpec {
        FakeSpec { id, starts: true }
    }

    const SIZE: PoolSize = PoolSize {
        workers: 2,
        max_waiting: 10,
        max_activations: None,
        recycle_above: None,
    };

    #[tokio::test]
    async fn a_worker_of_lines_refuses_values_and_requests_and_stays_in_service() {
        let slot = Pool::<Fake>::start(spec(1), SIZE, End::Logs).await.unwrap();
        let value = Activation {
            context: Arc::default(),
            payload: Payload::Value(Some(serde_json::json!({"n": 1}))),
        };
        let request = Activation {
            context: Arc::default(),
            payload: Payload::Request(Box::new(HttpRequest::new(axum::body::Body::empty()))),
        };
        for activation in [value, request] {
            match slot.activate(activation, None).await {
                Err(RunError::BadInput(message)) => assert_eq!(message, worker::NO_REQUESTS),
                Err(other) => panic!("{other}"),
                Ok(_) => panic!("a worker of lines answered something else"),
            }
        }
        assert_eq!(answer(&slot).await, "{\"spec\":1}\n");
    }

    #[tokio::test]
    async fn a_worker_that_has_served_outlives_an_upgrade_and_its_successor_is_new() {
        let slot = Pool::<Fake>::start(spec(1), SIZE, End::Logs).await.unwrap();
        assert_eq!(answer(&slot).await, "{\"spec\":1}\n");
        let failing = FakeSpec {
            id: 2,
            starts: false,
        };
        assert!(slot.upgrade(failing).await.is_err());
        assert_eq!(answer(&slot).await, "{\"spec\":1}\n");
        assert_eq!(slot.upgrade(spec(3)).await.unwrap(), 0, "nothing swapped");
        assert_eq!(
            answer(&slot).await,
            "{\"spec\":1}\n",
            "the worker that served keeps its state"
        );
        assert_eq!(
            lock(&slot.idle).len(),
            1,
            "the unneeded fresh worker is not kept"
        );
        // Once it ends, its successor is made from the new spec.
        assert!(slot.activate(line(b"exit\n"), None).await.is_err());
        assert_eq!(answer(&slot).await, "{\"spec\":3}\n");
    }

    #[tokio::test]
    async fn a_worker_that_has_not_served_is_swapped_at_an_upgrade() {
        let slot = Pool::<Fake>::start(spec(1), SIZE, End::Logs).await.unwrap();
        assert_eq!(slot.upgrade(spec(2)).await.unwrap(), 1);
        assert_eq!(answer(&slot).await, "{\"spec\":2}\n");
        let idle = lock(&slot.idle);
        assert_eq!(idle.len(), 1, "the old worker was swapped, not added to");
        assert!(idle.iter().all(|e| e.generation == 1 && e.worker.0 == 2));
    }

    /// A worker that answers how many activations it has served, made by a spec that
    /// counts the workers made.
    struct Counting(u32);

    impl Worker for Counting {
        type Spec = Arc<AtomicUsize>;

        async fn start(made: &Self::Spec, _: Start<'_>) -> Result<Self, StartError> {
            made.fetch_add(1, Ordering::SeqCst);
            Ok(Counting(0))
        }

        fn is_alive(&mut self) -> bool {
            true
        }

        fn discard_stray_output(&mut self) -> Option<Bytes> {
            None
        }

        async fn activate(&mut self, _job: Job) -> Result<Bytes, RunError> {
            self.0 += 1;
            Ok(Bytes::from(format!("{{\"count\":{}}}\n", self.0)))
        }
    }

    #[tokio::test]
    async fn a_worker_is_replaced_after_its_activations_by_one_made_ahead() {
        let made = Arc::new(AtomicUsize::new(0));
        // One worker at a time: the next activation waits for the successor.
        let size = PoolSize {
            workers: 1,
            max_activations: std::num::NonZeroU32::new(2),
            ..SIZE
        };
        let pool = Pool::<Counting>::start(made.clone(), size, End::Logs)
            .await
            .unwrap();
        let mut answers = Vec::new();
        for _ in 0..5 {
            answers.push(answer(&pool).await);
        }
        assert_eq!(
            answers,
            [
                "{\"count\":1}\n",
                "{\"count\":2}\n",
                "{\"count\":1}\n",
                "{\"count\":2}\n",
                "{\"count\":1}\n"
            ]
        );
        // The third worker was made ahead, after the fourth answer, and waits idle.
        let ready = tokio::time::timeout(std::time::Duration::from_secs(5), async {
            while lock(&pool.idle).len() != 1 || made.load(Ordering::SeqCst) != 3 {
                tokio::task::yield_now().await;
            }
        });
        assert!(ready.await.is_ok(), "made {}", made.load(Ordering::SeqCst));
        // Stopping the pool waits for, and stops, a successor being made.
        pool.stop().await;
        assert!(lock(&pool.idle).is_empty());
    }

    /// A worker whose activations wait for a go-ahead, and which records what it was told
    /// about the queue before each.
    struct Gated {
        gate: Arc<tokio::sync::Semaphore>,
        told: Arc<Mutex<Vec<bool>>>,
    }

    impl Worker for Gated {
        type Spec = (Arc<tokio::sync::Semaphore>, Arc<Mutex<Vec<bool>>>);

        async fn start(spec: &Self::Spec, _: Start<'_>) -> Result<Self, StartError> {
            Ok(Gated {
                gate: spec.0.clone(),
                told: spec.1.clone(),
            })
        }

        fn is_alive(&mut self) -> bool {
            true
        }

        fn discard_stray_output(&mut self) -> Option<Bytes> {
            None
        }

        fn others_queued(&mut self, queued: bool) {
            lock(&self.told).push(queued);
        }

        async fn activate(&mut self, _job: Job) -> Result<Bytes, RunError> {
            self.gate.acquire().await.unwrap().forget();
            Ok(Bytes::from_static(b"{}\n"))
        }
    }

    #[tokio::test]
    async fn a_worker_is_told_whether_activations_queue_behind_the_one_it_serves() {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let told = Arc::new(Mutex::new(Vec::<bool>::new()));
        let one = PoolSize {
            workers: 1,
            max_waiting: 10,
            max_activations: None,
            recycle_above: None,
        };
        let slot = Pool::<Gated>::start((gate.clone(), told.clone()), one, End::Logs)
            .await
            .unwrap();
        let runs: Vec<_> = (0..3)
            .map(|_| {
                let slot = slot.clone();
                tokio::spawn(async move { slot.activate(line(b"{}\n"), None).await })
            })
            .collect();
        // The first is served alone; two queue behind it.
        while slot.waiting.load(Ordering::Relaxed) < 2 {
            tokio::task::yield_now().await;
        }
        gate.add_permits(3);
        for run in runs {
            run.await.unwrap().unwrap();
        }
        assert_eq!(*lock(&told), [false, true, false]);
    }
}

/**
 * Every default kvgate uses, in one place, each with the reason it has this value.
 * The config schema (./schema.ts) and the CLI read from here; nothing else hard-codes these.
 */
export const DEFAULTS = {
  /** Envoy's ext_proc listener convention (the Gateway API endpoint picker uses 9002 too). */
  grpcPort: 9002,
  /** Prometheus convention for a sidecar's metrics/admin port. */
  adminPort: 9090,
  /** The admin API can drain workers: reachable from the pod only unless an operator opts in. */
  adminHost: '127.0.0.1',
  /** Listen on every interface: Envoy usually runs in another pod or container. */
  grpcHost: '0.0.0.0',
  /** The embedded store: a single replica needs nothing else running. */
  store: 'memory',

  /**
   * How kvgate tells Envoy the worker: `cluster_header` names the worker's Envoy cluster in
   * `routing.header` (envoy/envoy.yaml); `endpoint_picker` speaks the Gateway API Inference
   * Extension protocol (an `ip:port` in `x-gateway-destination-endpoint` and in dynamic metadata
   * `envoy.lb`, for an ORIGINAL_DST cluster or an InferencePool). The first needs no address list.
   */
  routingProtocol: 'cluster_header' as 'cluster_header' | 'endpoint_picker',
  /** The request header kvgate sets; envoy/envoy.yaml routes on it with `cluster_header`. */
  routingHeader: 'x-kvgate-cluster',
  /** 429 tells a client (and Envoy's retry policy) that trying later is right; 503 is for "no worker". */
  shedStatus: 429,
  /** Short: in-flight counts fall as soon as any running request finishes its prefill. */
  retryAfterS: 1,
  /**
   * When the routing decision is made: with `buffered` Envoy holds the headers until kvgate answers
   * the body, so keys from the body (OpenAI `user`, prompt prefix) can steer routing. Envoy 1.35+
   * declares its filter's mode on every stream (`protocol_config`) and kvgate follows that; this is
   * the fallback for older Envoys and must then match the filter's `request_body_mode`.
   */
  requestBodyMode: 'buffered' as 'buffered' | 'streamed' | 'none' | 'full_duplex',
  /**
   * The filter's response body mode, the fallback for Envoys that do not send `protocol_config`.
   * Only `full_duplex` changes what kvgate answers (response chunks come back as
   * `streamed_response`); NONE, STREAMED and BUFFERED response bodies are all answered alike.
   */
  responseBodyMode: 'none' as 'none' | 'streamed' | 'buffered' | 'full_duplex',
  /**
   * A request stops counting against its worker's in-flight limit at its response headers: that ends
   * the queueing and prefill that affinity and the limit govern, and needs no per-chunk ext_proc hop.
   * `response_end` counts the whole decode, if Envoy sends response bodies.
   */
  releaseOn: 'response_headers' as 'response_headers' | 'response_end',

  /** Common header for conversation ids (AIBrix and llm-d use the same name). */
  sessionHeader: 'x-session-id',
  sessionCookie: 'kvgate-session',
  /**
   * The endpoints whose bodies carry session fields and prompts: OpenAI chat and completions,
   * Anthropic Messages and OpenAI Responses (vLLM and SGLang serve all four).
   */
  sessionPaths: ['/v1/chat/completions', '/v1/completions', '/v1/messages', '/v1/responses'],
  /** The usual estimate for English text with Llama/GPT tokenizers; only sizes blocks and caches. */
  charsPerToken: 4,
  /**
   * 256 characters ≈ 64 tokens per prefix block: the block size llm-d's prefix scorer clamps to at
   * least, fine enough to resolve ~1% of an 8k-token prompt, coarse enough that the index stays
   * small and a decision writes few Redis fields.
   */
  prefixBlockChars: 256,
  /**
   * Blocks hashed and matched per request: 512 × 256 chars ≈ 32k tokens. Past that the match is
   * already decisive, and it bounds hashing and index work for 400 KB prompts.
   */
  prefixMaxBlocks: 512,
  /** A sessionless request's key covers its first 8 blocks (~2 KB): what one app's requests share. */
  prefixKeyBlocks: 8,
  /** A prefix block not routed to for 30 minutes is long gone from a busy worker's HBM. */
  prefixTtlS: 1800,
  /**
   * KV tokens a worker can hold when its config does not say: Llama-3-8B on one H100 (80 GB,
   * ~128 KiB of KV per token, ~50 GB left for KV) holds about 400k tokens (an estimate from vLLM's
   * default `gpu_memory_utilization` of 0.9, less the weights and activations).
   * Bounds how many prefix blocks the index believes a worker holds.
   */
  kvCapacityTokens: 400_000,
  /** Default routing: sticky sessions, else prefix overlap traded against load. */
  policy: 'both' as 'session' | 'prefix' | 'both' | 'least_loaded',
  /**
   * Score weights (src/routing/score.ts). Prefix and load weigh the same, so holding the whole
   * prompt beats an idle worker until the holder is nearly full; KV pressure at half weight
   * breaks near-ties and steers new work off workers about to evict.
   */
  prefixWeight: 1,
  loadWeight: 1,
  kvWeight: 0.5,
  /**
   * The fair-share term for new sessions (src/routing/score.ts): at weight 3 a worker's prefix
   * advantage is gone once it does a third more than the fleet's mean work, so the sessions of a
   * shared system prompt spread instead of piling onto the first worker that held it. 0 turns it
   * off. Weight 1 (gone at twice the mean) was enough at light load but not near saturation,
   * where a busy worker's queue costs more than the shared prefix saves. Tuned with
   * `kvgate sim --sweep` on held-out seeds (101, 102; chat and agent; docs/BENCHMARKS.md):
   * goodput at a 2 s p99 TTFT summed over the four went from 4.2 loads (weight 1, floor 1) to
   * 4.6 (weight 3, floor 1) and 4.8 (weight 3, floor 3); chat seed 101 at load 0.8 went from
   * p99 1.1 s to 0.11 s; hit rates at the workloads' own rates moved by 0.1-0.2 points.
   */
  balanceWeight: 3,
  /**
   * LoRA adapter affinity (src/routing/filters/adapter.ts): a worker already running or queueing
   * the request's adapter scores this much more. Half the load range: loading an adapter from host
   * memory stalls a batch for tens of milliseconds, about what a few queued prefills cost, so a
   * worker with the adapter wins until it is half a limit busier than one without. Workers whose
   * adapter slots are all taken are filtered out (while another can serve), not merely scored.
   */
  adapterWeight: 0.5,
  /**
   * Whether workers whose adapter slots are all held by other adapters are excluded (while another
   * can serve). On: such a worker would hold the request back behind unrelated work. Off (with
   * weight 0) turns adapter affinity off entirely, e.g. to measure it (`kvgate sim --adapters`).
   */
  adapterFilter: true,
  /**
   * The backlog term (src/routing/scorers/backlog.ts): prefill this gate has queued on a worker,
   * in units of the request's own prompt, weighed where a session is placed or moved (requests
   * without a session are scored without it). On ten held-out agent seeds (101-110, loads 0.2-1.6,
   * 2 s SLO) it raised goodput on five (by 0.2-0.4 of capacity) and lowered it on one (1.0 to
   * 0.8): summed 11.4 to 12.4 (weights 0.5 and 2: 11.8 each); mean tokens/s at 1.6 +4%. Chat
   * and the mix (seeds 101-104) kept their goodput (the mix's seed 101 lost 2.4 points of hit rate
   * at 0.8); RAG and the Mooncake
   * traces carry no sessions. For every request, as first tried, it cost the Mooncake synthetic
   * trace 3-4 points of hit rate and RAG seed 104 a step of goodput: a one-off prompt is best
   * placed by what holds it, a session's by the work it brings (docs/DESIGN.md "Queued prefill").
   */
  backlogWeight: 1,
  /**
   * The sessions term (src/routing/scorers/sessions.ts): a worker's excess over its fair share of
   * the fleet's live sessions, weighed where a session with a long prompt is placed. Agent loops
   * spend most of their time in tool calls, so a worker holding many live agent sessions can report
   * an empty queue and the balance term keeps placing new ones there; their next steps then pile
   * up on it. At weight 3 (the balance term's) and a floor of 6 sessions, on the held-out agent
   * seeds (101, 102; loads 0.2-1.6): sheds at 1.4 81 → 10 and 11 → 0, imbalance at 1.4 1.62 →
   * 1.29 and 1.18 → 1.08, goodput 1.25 → 1.25 and 1.35 → 1.40. A floor of 3 gained more goodput
   * (1.40, 1.45) but cost the mix (seed 101 at 0.8 of capacity: 39 requests shed against 7, where
   * seven runs perturbing an unrelated weight give 7-23); floors of 4 and 8 cost it the 23 that 6 does, and
   * 10 nothing, but at 8 and 10 agent seed 102 lost goodput (1.35 → 1.30). 0 turns it off. docs/benchmarks/policy-rounds.md,
   * fifteenth round.
   */
  sessionsWeight: 3,
  /** Live sessions below which no worker counts as ahead of its share of them (the balance floor's role). */
  sessionsFloor: 6,
  /**
   * A session is live on its worker for this long after its last request was routed: an agent's
   * step comes every few seconds (a tool call between), and one that ended stops counting soon. 30 s
   * counted finished sessions too: held-out agent seed 101 at 1.4 shed 57 requests, against 0 at 10 s.
   */
  sessionsWindowS: 10,
  /**
   * Only sessions whose last prompt held this many tokens count, and only a session placed with
   * such a prompt is weighed by the term: agent loops (4k-8k tokens of instructions), not chat
   * turns. Counting every session spread the sessions a shared system prompt draws to its holder;
   * with a chat placement weighed too, held-out chat lost goodput (2.54 → 2.50, 2.41 → 2.34).
   */
  sessionsMinTokens: 4096,
  /**
   * Mean work (running + queued requests) below which excess is divided by this figure instead
   * of the mean, so that on a lightly loaded fleet one request more than the mean costs at most
   * weight / floor of a score, not the whole term. At weight 3 and floor 3 that is still 1: while
   * the fleet averages three requests or fewer a worker, a worker running one more than the mean
   * loses a new session to an idle one even when it holds the session's whole shared prompt,
   * which then gets computed on a second worker. That copy is most of why kvgate's hit rate
   * trails the policies that keep each prompt on one worker at light load (by 0.1-0.2 points on
   * the held-out chat and agent sweeps at 0.2 of capacity, where those run at imbalance 2-3 and
   * a median end-to-end latency 30-90% longer). Under load the mean is far above the floor and it
   * stops mattering. With weight 1, floors above 1 kept too many sessions on their prefix's worker at
   * the workloads' own rates (chat and agent seeds 1-4: imbalance 1.15-1.26 and 1.45-1.58 at 1;
   * 1.18-1.36 and 1.70-2.26 at 4); with weight 3 the sweep above preferred 3 to 1. Floors of 6
   * and 12 (a request over the mean costing a half and a quarter), and exempting work up to the
   * floor, gained light-load hit rate within the runs' noise and cost held-out goodput or balance
   * past capacity (docs/benchmarks/policy-rounds.md, eighteenth round).
   */
  balanceFloor: 3,
  /**
   * A session with this many requests in flight on its worker spills to scoring. Agent loops send
   * one call at a time and chats rarely overlap; four concurrent calls is fan-out, which gains more
   * from spreading than from one cache (SMG caps sticky sessions at 2 for the same reason).
   */
  maxInflightPerSession: 4,

  /**
   * Classes of service, highest first, each with the share of a worker's in-flight limit its
   * requests may fill (src/routing/filters/class-share.ts). The names are the Gateway API Inference
   * Extension's criticality bands. The top class uses the whole limit, so it is never shed while
   * any worker could take it; a lower class stops short of it, and that headroom is the top's:
   *  - standard 1: unclassified traffic (the default class) keeps every worker's whole limit, so a
   *    fleet that sends no class routes and sheds exactly as it did before classes existed, and as
   *    the GIE's picker without flow control does (it sheds only negative-priority requests). A
   *    fleet that wants headroom for critical over standard lowers it: 0.875 keeps 2 of 16;
   *  - sheddable 0.5: batch and background work stops at half of every worker, so it never takes
   *    the places interactive traffic needs and is the first shed as the fleet fills.
   * A share never rounds a worker down to nothing: at a limit of 1 every class gets that place.
   */
  classes: [
    { name: 'critical', share: 1 },
    { name: 'standard', share: 1 },
    { name: 'sheddable', share: 0.5 },
  ] as ReadonlyArray<{ name: string; share: number }>,
  /** The class of a request nothing classifies: the GIE's unset criticality is treated as Standard too. */
  defaultClass: 'standard',
  /**
   * The request header that names a request's class. Clients set it by design (as they set the
   * GIE objective header): the shipped configs keep it. On routes where clients are not trusted,
   * the route's `class` knob wins over it, or the HCM's early header mutation can remove it as it
   * removes the routing header. Not `x-kvgate-class`: that is the knob's gRPC metadata key.
   */
  classHeader: 'x-kvgate-request-class',
  /**
   * Endpoint-picker mode: the Gateway API Inference Extension's header naming the request's
   * InferenceObjective (its `metadata.name`); `classes.objectives` maps those names to classes.
   */
  objectiveHeader: 'x-gateway-inference-objective',

  /** An idle conversation's KV cache is long evicted after an hour; keep the map small. */
  affinityTtlS: 3600,
  /**
   * A stored response outlives its KV cache: vLLM keeps it in memory until it restarts, and a
   * continuation sent elsewhere fails instead of running slower. A day covers agent runs and a
   * user's pause overnight; an entry is one small key (about 150 bytes in Redis), so a million
   * responses a day cost about 150 MB.
   */
  responseTtlS: 86_400,
  /** Per-worker concurrent requests before it counts as saturated; tune per GPU and model. */
  maxInflight: 16,
  /**
   * Past `maxInflight`, a worker whose engine reports KV room (below `kvPressure`; a long queue
   * alone does not count as full) still takes work, up to this many times its limit
   * (src/routing/overflow.ts); 0 or 1 makes the limit hard, as it was. A request count is a poor
   * "full": at 16, kvgate shed short agent turns that engines would have served in well under a
   * second (taubench sessions in `kvgate sim --sweep`: 330 of 2,000 shed at 1.4 of capacity). The
   * bound only has to cover what arrives while a scrape is on its way: 4 × 16 = 64 is the
   * `--max-inflight 64` that first showed the gain. On the held-out sweeps (chat and agent seeds
   * 101-102, the Mooncake synthetic trace; docs/BENCHMARKS.md) goodput was the same at 0 and 4
   * (and at 8 on agent seed 101, the one run at 8), and 8 let agent loops past capacity run more unevenly (imbalance 1.71 against 1.25 at 4,
   * tokens/s 14% lower at 1.6), so the smaller bound. While every engine reports room, the bound
   * counts past the shallowest queue the engines reported (src/routing/overflow.ts `queueCredit`):
   * the bound is for requests no scrape has shown yet, and counting reported queues again shed
   * every request kvgate shed on the held-out Mooncake synthetic trace at 1.4 (121, at engines
   * with KV half used).
   */
  overflowFactor: 4,
  /**
   * A one-off request goes to a worker past KV pressure only if that worker's free KV holds this
   * many times its prompt (src/routing/overflow.ts `fitsOneOff`), its tokens estimated from its
   * characters at `prefix.chars_per_token`. 3: at 2, on held-out slices of the Mooncake conversation
   * trace, tokens/s past capacity fell 4-7% against no fit; at 3, 3-4% (docs/benchmarks/policy-rounds.md, twelfth
   * round). The rest covers its output, what other gates sent since
   * the scrape, and the estimate's error (code and other scripts run at fewer characters a token
   * than English's 4). Where it is short, the engine queues the request until memory frees: a wait,
   * not a failure, and the next scrape reports the queue, which stops the fit.
   */
  oneOffKvMargin: 3,
  /**
   * Longest body kvgate reads. 8 MiB holds a ~1M-token prompt's text with room to spare and matches
   * the per_connection_buffer_limit_bytes in envoy/envoy.yaml; past it Envoy itself answers 413.
   */
  maxBodyBytes: 8 * 1024 * 1024,
  /**
   * The HTTP/2 connection window kvgate opens on each of Envoy's ext_proc connections
   * (src/extproc/receive-window.ts; a stream's window is the longest message kvgate accepts, so any
   * body it takes arrives in one go). HTTP/2's 64 KiB made Envoy wait for a window update every
   * 64 KiB on all the connection's streams together. 32 MiB carries 80 bodies of 400 KB, or three
   * of the longest, at once. It sets the pace, not a cap on memory: Node returns connection window
   * as data arrives, and what bounds a connection's buffered data is that kvgate reads each stream's
   * messages as they come (each at most the longest message), as it did with 64 KiB windows, only
   * with less waiting. Envoy's own default for the windows it opens is 16 MiB per stream, 24 MiB
   * per connection.
   */
  receiveConnectionWindowBytes: 32 * 1024 * 1024,
  /** A malformed body is the model server's to reject (it has the authoritative error format). */
  malformedBody: 'forward' as 'forward' | 'reject',

  /**
   * In-flight leases on the shared store expire unless renewed: a gate that dies stops renewing,
   * and its counts vanish within this time instead of pinning workers as busy forever.
   */
  leaseTtlS: 30,
  /**
   * Redis commands past this fall back to local state, well inside Envoy's 500 ms message_timeout.
   * A healthy Redis answers in well under a millisecond; 100 ms only trips on a sick one (or a
   * process starved of CPU), not on ordinary jitter.
   */
  storeTimeoutMs: 100,
  /** How often a Redis-backed gate refreshes its local view of worker loads and states. */
  storeRefreshMs: 250,
  /** The Redis connection's silence limit, in `store.timeout_ms`s: see `storeSocketTimeoutMs`. */
  storeSocketTimeouts: 5,
  /**
   * Decisions sent to Redis and not answered yet, past which a replica decides locally without
   * sending more. A Redis that answers, but slower than commands arrive (its CPU taken by another
   * tenant, a slow script, a big key's deletion), keeps its connection (never silent long enough
   * to be replaced), and the client keeps every command whose caller gave up until its reply:
   * without a cap that queue grew by the request rate for as long as Redis lagged, each long
   * prompt's command holding its block hashes (about 10 KB at 400 KB). Healthy, a replica has
   * its rate times Redis's latency waiting (20,000 decisions/s at 1 ms: 20); 1,024 waiting means
   * Redis is tens of milliseconds behind at any rate a replica reaches, where most decisions
   * would pass `store.timeout_ms` anyway.
   */
  storeMaxWaitingDecisions: 1024,
  /**
   * An ext_proc stream with no message for this long is ended and its lease released. Longer than
   * any gap Envoy leaves between messages of a live request (its upstream's time to first byte
   * under load); it exists to reclaim streams whose peer vanished without a reset reaching us.
   */
  streamIdleS: 600,
  /**
   * How long one of Envoy's HTTP/2 connections is used before kvgate asks Envoy (GOAWAY) to open a
   * new one. Envoy ends every ext_proc stream with a reset (RST_STREAM), one per HTTP request, and
   * nghttp2 (Node's HTTP/2) tears a connection down, failing every stream on it, once it has
   * received a burst of 1000 resets beyond 33 a second; Node 20 offers no setting for that limit.
   * A connection retired after a second sees at most its requests of that second: this alone holds
   * up to about a thousand requests a second per Envoy connection (Envoy keeps one per worker
   * thread); `connectionMaxStreams` holds past that.
   * Streams on a retired connection run to their end (for up to `limits.stream_idle_s`).
   */
  connectionAgeMs: 1000,
  /**
   * ... or once it has carried this many streams, whichever comes first. Age alone holds only up
   * to about a thousand requests a second per connection, and one gate process answers more than
   * that at small bodies. Half of nghttp2's burst of 1000 resets leaves room for the streams Envoy
   * still opens before it reads the GOAWAY and for those open when it comes, each of which ends
   * with a reset too. Turning connections over this often costs Envoy a connection setup (a TCP
   * and HTTP/2 handshake, no TLS resumption cost on plaintext) every 500 requests.
   */
  connectionMaxStreams: 500,
  /**
   * A retired connection gets HTTP/2's shutdown notice and a PING, and its final GOAWAY once the
   * PING is answered (src/extproc/connection-age.ts); this long after the notice when no answer
   * comes, and on TLS, where the notice is Node's plain GOAWAY and nothing is waited for. Long
   * enough for Envoy to have read the notice (a round trip) and sent its new streams elsewhere; the
   * connection serves its open streams meanwhile, at no cost. Not longer: on TLS nghttp2 ignores a
   * stream that arrives after the first GOAWAY until the final one refuses it (docs/RELIABILITY.md),
   * so this is also how long such a stream waits; 5 s (Envoy's own drain grace) made the test
   * harness time out on them.
   */
  goawayNoticeMs: 1000,
  /**
   * FULL_DUPLEX_STREAMED: the longest kvgate waits for a request body to end before it decides on
   * the headers alone and lets the body flow. Envoy runs no message timer in that mode (only the
   * HCM's stream idle timeout), so kvgate keeps its own: a client that uploads slowly, or never
   * finishes, then costs a request its body-based affinity, never its answer, and kvgate stops
   * holding its body. An LLM request body arrives in milliseconds; 5 s is far beyond that.
   */
  fullDuplexBodyWaitMs: 5000,
  /**
   * Not ready while the shared store is unreachable: Envoy and Kubernetes then prefer replicas that
   * can see the shared placements. Set true to stay ready and route on local state (deliberately
   * degraded), e.g. with a single replica where any affinity beats the fallback route's none.
   */
  readyWhenStoreUnreachable: false,
  /** How often readiness re-checks the store: fresher than Envoy's 5 s health-check interval, one PING a second. */
  readinessIntervalMs: 1000,
  /**
   * How long a stopping gate lets open ext_proc streams finish. An open stream is a request waiting
   * for its worker's response headers (queueing and prefill); under Kubernetes' default 30 s
   * termination grace, so the process exits on its own before SIGKILL.
   */
  shutdownGraceS: 25,
  /**
   * How long a stopping gate keeps accepting new streams while it reports NOT_SERVING, before it
   * drains: the time its proxies need to stop choosing it (Envoy's health check, interval ×
   * unhealthy_threshold: 10 s in envoy/envoy.yaml; an EDS or DNS update). 0: the Kubernetes
   * manifest holds SIGTERM back with a preStop sleep instead, which covers the endpoint removal
   * Kubernetes starts at the same moment; a gate run elsewhere behind a health-checking Envoy
   * should set it.
   */
  shutdownDelayS: 0,
  /**
   * A stopping gate retires its connections (the shutdown notice, then the final GOAWAY) and waits
   * until no connection has come or gone for this long before it closes the rest: Envoy opens its
   * next connection when it reads a notice, a round trip and a handshake after the last final
   * GOAWAY at most, and that one must get the notice too rather than an immediate GOAWAY. 200 ms
   * covers a cross-zone round trip several times; it is paid once per shutdown.
   */
  shutdownQuietMs: 200,
  /**
   * Routing decisions each gate keeps, with their explanations, for `GET /debug/decisions`: enough
   * to find a `kvgate try` request among a busy gate's last second or two of traffic, and at a few
   * KB each (every candidate's figures) a bounded few hundred KB however busy the gate is. Also
   * the most `?limit=` may ask for.
   */
  decisionLogSize: 100,
  /** What `GET /debug/decisions` returns without `?limit=`: a screenful for a person reading it. */
  debugDecisionsLimit: 20,
  /** Namespace for every Redis key, so kvgate can share a Redis with other tenants. */
  storeKeyPrefix: 'kvgate',
  /** Locally cached affinities; a stale one costs one extra round trip, never a wrong decision. */
  localAffinityCacheSize: 100_000,

  /** Model-server metrics are read this often: the tick the Gateway API endpoint picker uses. */
  scrapeIntervalMs: 50,
  /** A scrape slower than this failed: the worker is too busy or gone. */
  scrapeTimeoutMs: 500,
  /** Data older than this is stale and the worker counts as down (the endpoint picker's 2 s). */
  staleAfterMs: 2000,
  /**
   * A worker's own GPUs on its DCGM exporter's page (`workers[].dcgm_gpus`): `all` reads every GPU
   * on the page, right for an exporter that serves that worker alone (a sidecar, or a node that
   * runs one worker). An exporter covers its whole node, so where several workers share a node
   * each names its GPUs (indices or UUIDs), or another worker's hot or full GPU makes it pressured.
   */
  dcgmGpus: 'all' as const,
  /** Consecutive failed scrapes before a worker is down: one lost packet is not an outage. */
  scrapeFailuresDown: 3,
  /** KV-cache use (or GPU memory use, where memory is configured as a signal) that makes a worker pressured. */
  kvPressure: 0.85,
  /**
   * A pressured worker keeps what it holds: its sessions, and (in the prompt-aware modes) requests
   * whose prompt it holds at least this share of (src/routing/filters/takes-new-work.ts). Half:
   * then most of the prefill is saved there, and a RAG request or a conversation without a
   * session id is no new work for it. Not a knob: on the held-out RAG sweeps any share from a
   * quarter to three quarters gave the same result (a request holds its document, or nothing).
   */
  pressuredHoldsShare: 0.5,
  /** Queued requests (engine-reported) past which a worker takes no new sessions. */
  maxQueue: 32,
  /** GPU temperature past which a worker takes no new sessions: data-centre GPUs throttle near 85-90 °C. */
  maxTempC: 85,
  /**
   * Preemptive migration is on: moving a pressured worker's coldest sessions before its engine
   * evicts or preempts them is what the ~85% threshold is for; `migration.enabled: false` leaves a
   * pressured worker's sessions where they are (it still takes no new ones).
   */
  migrationEnabled: true,
  /**
   * How often a pressured worker's coldest sessions are moved while it stays pressured. Moving a
   * live session costs its next turn a recompute on the new worker; on the held-out simulator
   * sweeps 1 s moved live sessions often enough to cost hit rate and shed more than 5 s did.
   */
  migrationIntervalMs: 5000,
  /** Share of a pressured worker's sessions moved per round, coldest first (0.5 did worse than this on the held-out sweeps, for the same reason). */
  migrationFraction: 0.25,
  /** Most sessions moved per round: bounds the offload burst a worker-side agent must absorb. */
  migrationMaxSessions: 64,
  /** Offload events kept on the Redis Stream (approximate trim). */
  offloadStreamMaxLen: 10_000,
  /** The one pool every worker belongs to until pools are configured. */
  pool: 'default',

  /**
   * Per-route knobs arrive as gRPC metadata on the ext_proc call (ExtProcPerRoute
   * grpc_initial_metadata) under this prefix. `x-` keeps them apart from gRPC's reserved `grpc-`
   * keys and from Envoy's own headers, and one prefix makes an unknown knob recognisable as a typo.
   */
  knobMetadataPrefix: 'x-kvgate-',
  /** The dynamic-metadata namespace Envoy forwards in metadata_context (metadata_options.forwarding_namespaces). */
  knobNamespace: 'kvgate',
  /**
   * A misconfigured route sends the same bad knob with every request: one log line per distinct
   * problem per minute says it without flooding the log.
   */
  knobProblemLogIntervalMs: 60_000,
  /**
   * How long the config file must be quiet before it is re-read: editors write a file in several
   * steps and Kubernetes swaps a ConfigMap through two or three renames; 250 ms covers both and is
   * still quick for a person watching the log.
   */
  configReloadDebounceMs: 250,
  /**
   * How often the config path is also stat()ed, beside the directory watch. The watch misses a
   * change it has no event for: a config path that is a symlink into another directory (changes
   * happen there), or a config directory removed and made again (the watch stays on the old one).
   * A stat follows the symlink to whatever is there now; one every 2 s costs nothing and still
   * applies such a change within seconds.
   */
  configPollMs: 2000,
  logLevel: 'info',
  /**
   * The most log text waiting to be written to stdout, in bytes; lines past it are dropped and
   * counted (`kvgate_log_lines_dropped_total`). pino writes asynchronously, and a stdout nobody
   * reads (a stalled log collector, a full pipe) would otherwise grow the buffer by every line the
   * gate writes, until the process runs out of memory: a logging problem would take routing down.
   * 16 MiB is tens of thousands of lines, minutes of a busy gate's logging at info, so a collector
   * that pauses briefly loses nothing.
   */
  logBufferMaxBytes: 16 * 1024 * 1024,
  /**
   * Spans per OTLP export when OTEL_BSP_MAX_EXPORT_BATCH_SIZE is unset (the SDK's default is 512).
   * The batch processor flushes a full batch from inside `span.end()`, and the exporter serialises
   * it there, on the thread that answers Envoy: 512 kvgate spans (each with its candidates' arrays)
   * held that thread for 8-15 ms at a time. 64 spans cost an eighth of that per pause, which a
   * request waiting behind it can absorb; the queue (OTEL_BSP_MAX_QUEUE_SIZE) still bounds memory.
   */
  traceExportBatchSize: 64,
} as const;

/**
 * How long a Redis connection may receive nothing while replies are due before it is destroyed and
 * replaced (ioredis's `socketTimeout`): `DEFAULTS.storeSocketTimeouts` times `store.timeout_ms`
 * (500 ms by default), at least 250 ms, at most half the lease TTL.
 *
 * A connection whose packets are dropped without either side closing it (a partition, a dead NAT
 * entry, a host gone without a reset) stays "ready" for the client: `store.timeout_ms` fails each
 * command, but ioredis keeps every command it wrote queued for a reply that never comes, and the
 * gate's next commands join them, so the queue and the heap grow for as long as it lasts (TCP
 * keepalive notices after minutes). A healthy Redis answers in well under a millisecond, and every
 * decision has long fallen back at a few timeouts, so silence that long means the connection is of
 * no use: replacing it costs a reconnection and a resync, which run when Redis is back anyway. The
 * floor keeps a pause of this process's own event loop (a GC, a starved CPU), during which replies
 * wait unread, from passing for a dead connection when `store.timeout_ms` is tiny. Below the lease
 * TTL, so that a silent connection is replaced, and the leases it renews re-added, before Redis
 * lapses them.
 */
export function storeSocketTimeoutMs(timeoutMs: number, leaseTtlMs: number): number {
  return Math.min(Math.max(DEFAULTS.storeSocketTimeouts * timeoutMs, 250), Math.floor(leaseTtlMs / 2));
}

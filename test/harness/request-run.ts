/**
 * One HTTP request through the harness's Envoy: HCM header setup, the decoder filter chain
 * (header_mutation, ext_proc), the router (route cache, cluster lookup), the simulated upstream
 * and the encoder path back through ext_proc. Message order and held/released headers follow
 * Envoy's ext_proc filter (ext_proc.cc onHeaders/onData/onTrailers, processor_state.cc).
 */
import { randomUUID } from 'node:crypto';
import { isIP } from 'node:net';
import type { ReceivedCommonResponse as CommonResponse } from '../../src/extproc/messages.js';
import type { HttpFilter, OriginalDstLb, ParsedEnvoyConfig } from './envoy-config.js';
import type {
  HarnessRequest,
  Outcome,
  OutcomeBase,
  UpstreamRequest,
  UpstreamResponse,
  UpstreamSpec,
} from './envoy-harness.js';
import {
  type DirectionState,
  type ExtProcSession,
  type Handled,
  type LocalReply,
  type MessageRecord,
  localReply,
  mergePerRoute,
} from './ext-proc-session.js';
import { DynamicMetadata } from './dynamic-metadata.js';
import { HeaderList } from './header-list.js';
import { applySetMetadata } from './metadata.js';
import { applyExtProcHeaderMutation, applyRequestMutations } from './mutations.js';
import { type RouteDecision, resolveRoute } from './routing.js';

/** A response on its way back through the encoder filters (from upstream or a local reply). */
interface ResponseDraft {
  headers: HeaderList;
  body: Buffer;
  bodyPresent: boolean;
  chunks: Buffer[];
  trailers?: HeaderList;
  /** CONTINUE_AND_REPLACE on the response headers: nothing more is sent for the response. */
  replaced?: boolean;
  /** Set when this is a local reply (router, buffer limit), with its response code details. */
  local?: { details?: string };
}

type Flow = { type: 'continue' } | { type: 'local'; reply: LocalReply };

/** One direction of a FULL_DUPLEX_STREAMED exchange (RequestRun.duplex). */
interface DuplexSide {
  direction: 'request' | 'response';
  dir: DirectionState;
  headers: HeaderList;
  chunks: Buffer[];
  bodyPresent: boolean;
  trailers: HeaderList | undefined;
  /** Applies the headers reply's CommonResponse; an error message fails the request. */
  applyHeaders(cr: CommonResponse | null | undefined): string | undefined;
}

type DuplexResult =
  | { type: 'done'; body: Buffer }
  | { type: 'local'; reply: LocalReply; headersReleased: boolean };

type Encoded =
  | { type: 'response'; draft: ResponseDraft }
  | { type: 'local'; reply: LocalReply }
  | { type: 'reset'; details: string; status: number };

/** proto-loader also names the oneof case that is set (`oneofs: true`). */
type BodyMutation = NonNullable<CommonResponse['body_mutation']> & { mutation?: string };

const MISMATCH = 'mismatch between content length and the length of the mutated body';

/** Network::Utility::parseInternetAddressAndPortNoThrow: "a.b.c.d:port" or "[v6]:port", else undefined. */
function parseIpPort(s: string): string | undefined {
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(s);
  if (!m || Number(m[3]) > 65535) return undefined;
  const ip = m[1] ?? m[2] ?? '';
  return isIP(ip) === (m[1] !== undefined ? 6 : 4) ? s : undefined;
}

function toBuffer(b: Buffer | string | undefined): Buffer {
  return b === undefined ? Buffer.alloc(0) : Buffer.isBuffer(b) ? Buffer.from(b) : Buffer.from(b, 'utf8');
}

/** MutationUtils::applyBodyMutations: `body` replaces, `clear_body: true` empties, else unchanged. */
function applyBodyMutation(bm: BodyMutation, current: Buffer): Buffer {
  const which = bm.mutation ?? (bm.body !== undefined ? 'body' : bm.clear_body ? 'clear_body' : undefined);
  if (which === 'body') return Buffer.from(bm.body ?? Buffer.alloc(0));
  if (which === 'clear_body' && bm.clear_body) return Buffer.alloc(0);
  return current;
}

/** The size Envoy compares with content-length: body() of the mutation, '' for clear_body. */
function mutatedSize(bm: BodyMutation): number {
  const which = bm.mutation ?? (bm.body !== undefined ? 'body' : undefined);
  return which === 'body' ? (bm.body?.length ?? 0) : 0;
}

/**
 * The request headers as the HCM hands them to the first filter: HTTP/1 `host` becomes
 * `:authority` (the HTTP/1 codec), pseudo-headers first, keys lower-case; the HCM adds
 * x-forwarded-proto and x-request-id when absent (ConnectionManagerUtility::mutateRequestHeaders,
 * conn_manager_utility.cc), and a fixed-length body carries content-length.
 */
export function buildRequestHeaders(req: HarnessRequest): HeaderList {
  const input = HeaderList.from(req.headers);
  const h = new HeaderList();
  const scheme = input.get(':scheme') ?? 'http';
  h.add(':method', req.method);
  h.add(':path', req.path);
  h.add(':scheme', scheme);
  h.add(':authority', input.getRaw(':authority')[0] ?? input.getRaw('host')[0] ?? 'localhost');
  for (const [k, v] of input.entries()) {
    if (k !== ':authority' && k !== 'host' && k !== ':scheme' && k !== ':method' && k !== ':path') h.add(k, v);
  }
  if (!h.has('x-forwarded-proto')) h.add('x-forwarded-proto', scheme);
  if (!h.has('x-request-id')) h.add('x-request-id', randomUUID());
  if (req.body !== undefined && req.chunks === undefined && req.trailers === undefined && !h.has('content-length')) {
    h.add('content-length', String(toBuffer(req.body).length));
  }
  return h;
}

export class RequestRun {
  readonly headers: HeaderList;
  private body: Buffer;
  private bodyPresent: boolean;
  private readonly chunks: Buffer[];
  private readonly trailers: HeaderList | undefined;
  private bodyReplaced = false;
  /** The route cache: undefined = empty (resolve on next use), null = no route. */
  private route: RouteDecision | null | undefined = undefined;
  private routeCleared = false;
  /** Set once ext_proc lets the request headers go on to the router (no more header changes). */
  private released = false;
  private decision: RouteDecision | null = null;
  private readonly afterExtProc: HttpFilter[];
  /** The request's dynamic metadata (stream info): what it came with, set_metadata filters, the upstream's. */
  private readonly metadata: DynamicMetadata;
  private endpoint: string | undefined;

  /** The ext_proc filter of this request's filter chain; undefined when there is none (see the constructor). */
  private readonly session: ExtProcSession | undefined;

  constructor(
    private readonly config: ParsedEnvoyConfig,
    session: ExtProcSession | undefined,
    req: HarnessRequest,
  ) {
    this.headers = buildRequestHeaders(req);
    this.chunks = req.chunks ? req.chunks.map((c) => Buffer.from(c)) : [toBuffer(req.body)];
    this.body = Buffer.concat(this.chunks);
    this.bodyPresent = req.body !== undefined || req.chunks !== undefined;
    if (req.trailers) this.trailers = HeaderList.from(req.trailers);
    const chain = config.httpFilters;
    const extIdx = chain.findIndex((f) => f.kind === 'ext_proc');
    this.afterExtProc = extIdx >= 0 ? chain.slice(extIdx + 1) : [];
    this.metadata = new DynamicMetadata(structuredClone(req.metadata ?? {}));
    if (session) session.metadata = this.metadata;
    // HCM ConnectionManagerImpl::ActiveStream::decodeHeaders (conn_manager_impl.cc): the early
    // header mutation extensions run on the request headers first ("before any routing, tracing,
    // or any filter processing": http_connection_manager.proto, envoy/http/early_header_mutation.h;
    // header_mutation extension: early_header_mutation/header_mutation/header_mutation.cc
    // HeaderMutation::mutate), then refreshCachedRoute() picks and caches the route, and only then
    // does the first HTTP filter see the headers. A cluster_header route takes the header's value
    // here. From now on the route changes only when a filter clears the cache.
    applyRequestMutations(config.earlyHeaderMutations, this.headers);
    this.resolveRouteIfNeeded();
    // The filter chain is made now, on the route just picked (ActiveStream::decodeHeaders calls
    // refreshCachedRoute, then createDownstreamFilterChain). A filter disabled by default
    // (HttpFilter.disabled) is created only where that route says otherwise:
    // FilterChainUtility::createFilterChainForFactories (source/common/http/filter_chain_helper.cc)
    // takes `filterDisabled(name).value_or(disabled)`, and RouteEntryImplBase::filterDisabled
    // (source/common/router/config_impl.cc) asks the route's typed_per_filter_config, then the
    // virtual host's; an entry there that is not a FilterConfig counts as enabled
    // (PerFilterConfigs: "If a filter is explicitly configured we treat it as enabled"). A later
    // route change does not remake the chain.
    const enabledHere = !!this.route && (this.route.route.extProcPerRoute !== undefined || this.route.vhost.extProcPerRoute !== undefined);
    this.session = config.extProc?.disabledByDefault && !enabledHere ? undefined : session;
  }

  async run(upstream: UpstreamSpec | undefined): Promise<Outcome> {
    try {
      const decoded = await this.decode();
      let draft: ResponseDraft;
      let cluster: string | undefined;
      if (decoded.type === 'local') {
        draft = this.localDraft(decoded.reply);
      } else {
        const routed = this.routeDecision();
        if (routed.type === 'local') draft = this.localDraft(routed.reply);
        else {
          cluster = routed.cluster;
          draft = await this.callUpstream(routed.cluster, upstream);
        }
      }
      return this.outcome(await this.encode(draft), cluster);
    } finally {
      // Whatever happened, Envoy closes its side at the end (half-close, then reset):
      // Filter::onDestroy → closeStream (ext_proc.cc).
      this.session?.finish();
    }
  }

  // ---- decoder path ------------------------------------------------------------------------

  private async decode(): Promise<Flow> {
    for (const f of this.config.httpFilters) {
      if (f.kind === 'header_mutation') {
        // HeaderMutation::decodeHeaders (filters/http/header_mutation/header_mutation.cc) mutates
        // the headers and reads its per-route config from the route already cached; it never
        // clears the route cache, so the route picked at HCM decodeHeaders stands (the filter's
        // docs: it influences routing only if a later filter clears the cache).
        applyRequestMutations(f.requestMutations, this.headers);
        this.resolveRouteIfNeeded();
      } else if (f.kind === 'set_metadata') {
        applySetMetadata(this.metadata, f.entries);
      } else if (f.kind === 'ext_proc') {
        this.resolveRouteIfNeeded(); // mergePerRouteConfig() reads the cached route
        if (this.session) {
          // Merged once, on the route matched now; a later route change does not re-merge.
          const merged = this.route ? mergePerRoute([this.route.vhost.extProcPerRoute, this.route.route.extProcPerRoute]) : undefined;
          if (merged) this.session.applyPerRoute(merged);
        }
        const flow: Flow = this.session ? await this.decodeExtProc(this.session) : { type: 'continue' };
        this.release(); // runs the filters after ext_proc, then the router's lookup
        return flow;
      } else if (f.kind === 'router') {
        break;
      }
    }
    this.release();
    return { type: 'continue' };
  }

  private async decodeExtProc(s: ExtProcSession): Promise<Flow> {
    const dec = s.decoding;
    const hasTrailers = this.trailers !== undefined;
    const eos = !this.bodyPresent && !hasTrailers;
    if (dec.bodyMode === 'FULL_DUPLEX_STREAMED') return this.requestDuplex(s);

    if (dec.sendHeaders) {
      const p = s.send('request_headers', { request_headers: { headers: this.headers.toProto(), end_of_stream: eos } }, eos);
      // decodeHeaders drops content-length after sending, where the body may change size.
      if (s.shouldRemoveContentLength(dec)) this.headers.remove('content-length');
      const h = await s.awaitReply(p);
      if (h.type === 'local') return h;
      if (h.type === 'match') {
        const err = this.applyCommon(s, h.response.request_headers?.response, dec, this.headers);
        if (err) return this.toFlow(s.processingError(err));
      }
    } else if (s.shouldRemoveContentLength(dec)) {
      this.headers.remove('content-length');
    }

    // BUFFERED holds the headers until the body reply (so its header_mutation still applies);
    // otherwise the headers go on to the router now.
    if (s.complete || !this.bodyPresent || this.bodyReplaced || dec.bodyMode !== 'BUFFERED') this.release();

    if (!s.complete && this.bodyPresent && !this.bodyReplaced) {
      const flow =
        dec.bodyMode === 'BUFFERED'
          ? await this.requestBodyBuffered(s, hasTrailers)
          : dec.bodyMode === 'STREAMED'
            ? await this.requestBodyStreamed(s, hasTrailers)
            : ({ type: 'continue' } as const);
      if (flow.type === 'local') return flow;
    }
    this.release();

    if (this.trailers && dec.sendTrailers && !s.complete) {
      const h = await s.exchange('request_trailers', { request_trailers: { trailers: this.trailers.toProto() } });
      if (h.type === 'local') return h;
      if (h.type === 'match') {
        const tm = h.response.request_trailers?.header_mutation;
        const err = tm ? this.mutateHeaders(s, tm, this.trailers, false, false) : undefined;
        if (err) return this.toFlow(s.processingError(err));
      }
    }
    return { type: 'continue' };
  }

  /**
   * FULL_DUPLEX_STREAMED on the request path: the server's streamed body is what goes upstream.
   * Known gap: the route is picked once the whole exchange is done, where Envoy lets the headers
   * go on at the headers reply when the body has not ended yet (processor_state.cc
   * `handleHeadersResponse`: FULL_DUPLEX_STREAMED → continueIfNecessary), so a later body reply's
   * clear_route_cache re-picks the route here and cannot in Envoy. kvgate puts its routing
   * mutation in the headers reply (after its body wait, or the body's end), so none of its answers
   * depends on this.
   */
  private async requestDuplex(s: ExtProcSession): Promise<Flow> {
    const r = await this.duplex(s, {
      direction: 'request',
      dir: s.decoding,
      headers: this.headers,
      chunks: this.chunks,
      bodyPresent: this.bodyPresent,
      trailers: this.trailers,
      applyHeaders: (cr) => this.applyCommon(s, cr, s.decoding, this.headers),
    });
    if (r.type === 'local') return r;
    if (this.bodyPresent && !this.bodyReplaced) this.body = r.body;
    this.release();
    return { type: 'continue' };
  }

  /**
   * One direction in FULL_DUPLEX_STREAMED, after ext_proc.cc and processor_state.cc:
   *  - the headers, every body chunk and the trailers go out as they arrive, without waiting for
   *    any reply (Filter::handleDataStreamedModeBase: in this mode the data is drained, so only
   *    what the server streams back travels on);
   *  - the headers reply is expected first (callback state HeadersCallback; a body reply then is
   *    spurious); after it, StreamedBodyCallback if body was sent, else TrailersCallback
   *    (ProcessorState::getCallbackStateAfterHeaderResp);
   *  - body replies must carry `streamed_response` (handleStreamedBodyCallback: a plain body
   *    mutation is spurious in this mode); any number of them, the one with end_of_stream ends
   *    the body (handleDuplexStreamedBodyResponse);
   *  - a trailers reply is accepted in any callback state in this mode and lets the message
   *    continue (handleTrailersResponse);
   *  - no message timer (onStartProcessorCall); fail-open is off once a body was sent
   *    (Filter::failureModeAllow).
   */
  private async duplex(s: ExtProcSession, side: DuplexSide): Promise<DuplexResult> {
    const req = side.direction === 'request';
    const kinds = req
      ? ({ headers: 'request_headers', body: 'request_body', trailers: 'request_trailers' } as const)
      : ({ headers: 'response_headers', body: 'response_body', trailers: 'response_trailers' } as const);
    if (!side.dir.sendHeaders) throw new Error(`harness: FULL_DUPLEX_STREAMED with ${side.direction} header mode SKIP is not imitated`);
    const hasTrailers = side.trailers !== undefined;
    const eos = !side.bodyPresent && !hasTrailers;
    const hp = s.send(kinds.headers, { [kinds.headers]: { headers: side.headers.toProto(), end_of_stream: eos } }, eos);
    if (s.shouldRemoveContentLength(side.dir)) side.headers.remove('content-length');
    const bodyRecords: MessageRecord[] = [];
    if (side.bodyPresent) {
      const chunks = hasTrailers ? side.chunks.filter((c) => c.length > 0) : side.chunks;
      chunks.forEach((c, i) => {
        const ceos = i === chunks.length - 1 && !hasTrailers;
        bodyRecords.push(s.send(kinds.body, { [kinds.body]: { body: c, end_of_stream: ceos } }, ceos).record);
      });
    }
    const trailersSent = side.trailers !== undefined && side.dir.sendTrailers;
    const trailersRecord = trailersSent ? s.send(kinds.trailers, { [kinds.trailers]: { trailers: side.trailers!.toProto() } }).record : undefined;

    let state: 'headers' | 'body' | 'trailers' | 'idle' = 'headers';
    let headersDone = false;
    let bodyDone = !side.bodyPresent || bodyRecords.length === 0;
    let trailersDone = !trailersSent;
    const out: Buffer[] = [];
    let replies = 0;
    const local = (h: Handled, headersReleased: boolean): DuplexResult =>
      h.type === 'local' ? { type: 'local', reply: h.reply, headersReleased } : { type: 'done', body: Buffer.concat(out) };
    while (!(headersDone && bodyDone && trailersDone)) {
      const r = await s.receive(hp);
      // Processing complete (clean close, or a failure let through): the message continues with
      // what was streamed back so far; the drained chunks are gone.
      if (r.type !== 'message') return local(r, headersDone);
      const resp = r.response;
      const kind = resp.response;
      if (kind === kinds.headers) {
        if (state !== 'headers') return local(s.rejectSpurious('spurious message'), headersDone);
        s.accept(resp);
        hp.record.reply = kind;
        const cr = (req ? resp.request_headers : resp.response_headers)?.response;
        const err = side.applyHeaders(cr);
        if (err) return local(s.processingError(err), headersDone);
        headersDone = true;
        s.closeIfLast(kinds.headers, resp);
        if (cr?.status === 'CONTINUE_AND_REPLACE') return { type: 'done', body: Buffer.alloc(0) };
        state = bodyRecords.length > 0 ? 'body' : trailersSent ? 'trailers' : 'idle';
      } else if (kind === kinds.body) {
        // isValidBodyCallbackState: not before the headers reply, nor after the body ended.
        if (state !== 'body') return local(s.rejectSpurious('spurious message'), headersDone);
        const cr = (req ? resp.request_body : resp.response_body)?.response;
        const streamed = cr?.body_mutation?.streamed_response;
        if (!streamed) {
          return local(
            s.rejectSpurious('spurious message: Normal body mutation response is received while body_mode_ is FULL_DUPLEX_STREAMED'),
            headersDone,
          );
        }
        s.accept(resp);
        const rec = bodyRecords[replies++];
        if (rec) rec.reply = kind;
        if (cr && req) this.clearRouteCache(s, cr);
        out.push(Buffer.from(streamed.body ?? Buffer.alloc(0)));
        if (streamed.end_of_stream) {
          bodyDone = true;
          state = 'idle';
        }
        s.closeIfLast(kinds.body, resp);
      } else if (kind === kinds.trailers) {
        s.accept(resp);
        if (trailersRecord) trailersRecord.reply = kind;
        const tm = (req ? resp.request_trailers : resp.response_trailers)?.header_mutation;
        // A trailers reply for a message without trailers changes nothing (DuplexStreamedServerResponseWithSynthesizedTrailer).
        const err = tm && side.trailers ? this.mutateHeaders(s, tm, side.trailers, false, false) : undefined;
        if (err) return local(s.processingError(err), headersDone);
        // continueIfNecessary: the message goes on with the body streamed back so far.
        trailersDone = bodyDone = true;
        if (!headersDone) headersDone = true;
        s.closeIfLast(kinds.trailers, resp);
      } else {
        return local(s.rejectSpurious(kind ? 'spurious message' : 'unhandled message'), headersDone);
      }
    }
    return { type: 'done', body: Buffer.concat(out) };
  }

  private async requestBodyBuffered(s: ExtProcSession, hasTrailers: boolean): Promise<Flow> {
    // The filter manager buffers the body for ext_proc; past the listener's buffer limit it
    // answers 413 itself, without the server ever seeing the body
    // (ActiveStreamDecoderFilter::requestDataTooLarge, filter_manager.cc).
    if (this.body.length > this.config.bufferLimitBytes) {
      return { type: 'local', reply: localReply(413, Buffer.from('Payload Too Large'), 'request_payload_too_large') };
    }
    // Trailers with no data: nothing was buffered, so no body message (onTrailers).
    if (this.body.length === 0 && hasTrailers) return { type: 'continue' };
    const beos = !hasTrailers;
    const h = await s.exchange('request_body', { request_body: { body: this.body, end_of_stream: beos } }, beos);
    if (h.type !== 'match') return this.toFlow(h);
    const cr = h.response.request_body?.response;
    if (!cr) return { type: 'continue' };
    if (cr.header_mutation) {
      const err = this.mutateHeaders(s, cr.header_mutation, this.headers, false, s.shouldRemoveContentLength(s.decoding));
      if (err) return this.toFlow(s.processingError(err));
    }
    if (cr.body_mutation) {
      const cl = this.headers.get('content-length');
      if (cl !== undefined && /^\d+$/.test(cl) && Number(cl) !== mutatedSize(cr.body_mutation)) {
        return this.toFlow(s.processingError(MISMATCH));
      }
      this.body = applyBodyMutation(cr.body_mutation, this.body);
    }
    this.clearRouteCache(s, cr);
    return { type: 'continue' };
  }

  private async requestBodyStreamed(s: ExtProcSession, hasTrailers: boolean): Promise<Flow> {
    const chunks = hasTrailers ? this.chunks.filter((c) => c.length > 0) : this.chunks;
    // Pipelined: every chunk goes out before any reply is read; replies must come in order.
    const pending = chunks.map((c, i) => {
      const ceos = i === chunks.length - 1 && !hasTrailers;
      return s.send('request_body', { request_body: { body: c, end_of_stream: ceos } }, ceos);
    });
    const out: Buffer[] = [];
    for (const [i, p] of pending.entries()) {
      const chunk = chunks[i] ?? Buffer.alloc(0);
      const h = await s.awaitReply(p);
      if (h.type === 'local') return h;
      const cr = h.type === 'match' ? h.response.request_body?.response : undefined;
      // processor_state.cc handleStreamedBodyCallback: "spurious message: streamed_response is
      // received while body_mode_ is not FULL_DUPLEX_STREAMED". Fail-open lets the rest through.
      if (cr?.body_mutation?.streamed_response) {
        const r = s.rejectSpurious('spurious message');
        if (r.type === 'local') return r;
        this.body = Buffer.concat([...out, ...chunks.slice(i)]);
        return { type: 'continue' };
      }
      // The headers already went upstream: a header_mutation here changes nothing
      // ("Response had header mutations but headers aren't available"), and a cleared route
      // cache is never read again for this request.
      if (cr) this.clearRouteCache(s, cr);
      out.push(cr?.body_mutation ? applyBodyMutation(cr.body_mutation, chunk) : chunk);
    }
    this.body = Buffer.concat(out);
    return { type: 'continue' };
  }

  /** Applies a headers reply's CommonResponse (ProcessorState::handleHeadersResponse, processor_state.cc). */
  private applyCommon(
    s: ExtProcSession,
    cr: CommonResponse | null | undefined,
    dir: DirectionState,
    target: HeaderList,
    draft?: ResponseDraft,
  ): string | undefined {
    if (!cr) return undefined;
    const replacing = cr.status === 'CONTINUE_AND_REPLACE';
    if (cr.header_mutation) {
      const err = this.mutateHeaders(s, cr.header_mutation, target, replacing, s.shouldRemoveContentLength(dir));
      if (err) return err;
    }
    if (!draft) this.clearRouteCache(s, cr);
    if (replacing) {
      // The server replaces the whole message: the new body (if any) stands, nothing more is
      // sent for this direction.
      if (cr.body_mutation) {
        target.remove('content-length');
        const body = applyBodyMutation(cr.body_mutation, Buffer.alloc(0));
        if (draft) Object.assign(draft, { body, chunks: [body], bodyPresent: true, replaced: true } satisfies Partial<ResponseDraft>);
        else {
          this.body = body;
          this.bodyPresent = true;
          this.bodyReplaced = true;
        }
      }
      dir.bodyMode = 'NONE';
      dir.sendTrailers = false;
    }
    return undefined;
  }

  private mutateHeaders(
    s: ExtProcSession,
    mutation: NonNullable<CommonResponse['header_mutation']>,
    target: HeaderList,
    replacing: boolean,
    removeContentLength: boolean,
  ): string | undefined {
    return applyExtProcHeaderMutation(mutation, target, {
      rules: s.config.mutationRules,
      envoyPrefix: this.config.envoyHeaderPrefix,
      replacingMessage: replacing,
      removeContentLength,
      onRejected: s.countRejected,
      // The request header map carries the HCM's limits; other maps' limits are not modelled.
      ...(target === this.headers ? { limits: this.config.requestHeaderLimits } : {}),
    });
  }

  /**
   * DecodingProcessorState::clearRouteCache: needs a header_mutation in the same reply; then
   * route_cache_action decides (DEFAULT: the flag, CLEAR: always, RETAIN: never).
   */
  private clearRouteCache(s: ExtProcSession, cr: CommonResponse): void {
    const flag = cr.clear_route_cache === true;
    if (!cr.header_mutation) {
      if (flag) s.stats.clearRouteCacheIgnored++;
      return;
    }
    const action = s.config.routeCacheAction;
    if (action === 'RETAIN') {
      if (flag) s.stats.clearRouteCacheDisabled++;
      return;
    }
    if (action === 'CLEAR' || flag) {
      if (!this.released) {
        this.route = undefined;
        this.routeCleared = true;
      }
    }
  }

  private toFlow(h: Handled): Flow {
    return h.type === 'local' ? h : { type: 'continue' };
  }

  // ---- router --------------------------------------------------------------------------------

  private resolveRouteIfNeeded(): void {
    if (this.route === undefined) this.route = resolveRoute(this.config.routeConfig, this.headers);
  }

  /**
   * The headers continue past ext_proc: later filters run, then the router reads the cached route
   * (Router::Filter::decodeHeaders, router.cc: callbacks_->route()), re-picking it only if the
   * cache was cleared.
   */
  private release(): void {
    if (this.released) return;
    this.released = true;
    for (const f of this.afterExtProc) {
      if (f.kind === 'router') break;
      if (f.kind === 'header_mutation') {
        applyRequestMutations(f.requestMutations, this.headers);
        // Its per-route lookup re-picks the route only if ext_proc cleared the cache
        // (ActiveStream::route → refreshCachedRoute when no route is cached).
        this.resolveRouteIfNeeded();
      }
    }
    this.resolveRouteIfNeeded();
    this.decision = this.route ?? null;
  }

  /**
   * Router::Filter::decodeHeaders (router.cc): no route → 404 route_not_found; a direct_response
   * route answers itself; an unknown cluster → cluster_not_found_response_code; then the
   * cluster's load balancer chooses the host.
   */
  private routeDecision(): { type: 'upstream'; cluster: string } | { type: 'local'; reply: LocalReply } {
    const d = this.decision;
    if (!d) return { type: 'local', reply: localReply(404, Buffer.alloc(0), 'route_not_found') };
    const a = d.route.action;
    if (a.kind === 'direct_response') {
      return { type: 'local', reply: localReply(a.status, Buffer.from(a.body), 'direct_response') };
    }
    if (!this.config.clusters.has(d.cluster)) {
      return { type: 'local', reply: localReply(a.clusterNotFoundStatus, Buffer.alloc(0), 'cluster_not_found') };
    }
    const lb = this.config.originalDstClusters.get(d.cluster);
    if (lb) {
      const host = this.chooseOriginalDstHost(lb);
      // Router::Filter: the cluster's load balancer chose no host → sendNoHealthyUpstreamResponse.
      if (host === undefined) return { type: 'local', reply: localReply(503, Buffer.from('no healthy upstream'), 'no_healthy_upstream') };
      this.endpoint = host;
    }
    return { type: 'upstream', cluster: d.cluster };
  }

  /**
   * OriginalDstCluster::LoadBalancer::chooseHost (original_dst_cluster.cc): filter state (not
   * imitated), then metadataOverrideHost (the request's dynamic metadata at metadata_key; a list
   * gives its first element; only a string counts), then requestOverrideHost (the first value of
   * the use_http_header header), then the downstream connection's restored local address (never
   * here: no original_dst listener filter). Each candidate must parse as ip:port
   * (parseInternetAddressAndPortNoThrow), else it is skipped as invalid. upstream_port_override
   * replaces the port. undefined: no host.
   */
  private chooseOriginalDstHost(lb: OriginalDstLb): string | undefined {
    let host: string | undefined;
    if (lb.metadataKey) {
      let v: unknown = this.metadata.toJSON()[lb.metadataKey.key];
      for (const seg of lb.metadataKey.path) v = v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>)[seg] : undefined;
      if (Array.isArray(v) && v.length > 0) v = v[0];
      if (typeof v === 'string') host = parseIpPort(v);
    }
    if (host === undefined && lb.header !== undefined) {
      const value = this.headers.get(lb.header);
      if (value !== undefined) host = parseIpPort(value);
    }
    if (host !== undefined && lb.portOverride !== undefined) host = host.replace(/:\d+$/, `:${lb.portOverride}`);
    return host;
  }

  private async callUpstream(cluster: string, spec: UpstreamSpec | undefined): Promise<ResponseDraft> {
    const req: UpstreamRequest = { cluster, headers: this.headers.clone(), body: Buffer.from(this.body) };
    // ORIGINAL_DST chose its host at routeDecision (host selection, after routing).
    if (this.endpoint !== undefined) req.endpoint = this.endpoint;
    if (this.trailers) req.trailers = this.trailers.clone();
    const res: UpstreamResponse = typeof spec === 'function' ? await spec(req) : (spec ?? { status: 200 });
    for (const [ns, values] of Object.entries(res.metadata ?? {})) this.metadata.merge(ns, values);
    if (res.latencyMs) await new Promise<void>((r) => setTimeout(r, res.latencyMs));
    const headers = new HeaderList();
    headers.add(':status', String(res.status));
    for (const [k, v] of HeaderList.from(res.headers).entries()) if (k !== ':status') headers.add(k, v);
    const chunks = res.chunks ? res.chunks.map((c) => Buffer.from(c)) : [toBuffer(res.body)];
    const draft: ResponseDraft = {
      headers,
      body: Buffer.concat(chunks),
      bodyPresent: res.body !== undefined || res.chunks !== undefined,
      chunks,
    };
    if (res.trailers) draft.trailers = HeaderList.from(res.trailers);
    return draft;
  }

  private localDraft(reply: LocalReply): ResponseDraft {
    const draft: ResponseDraft = {
      headers: reply.headers,
      body: reply.body,
      bodyPresent: reply.body.length > 0,
      chunks: [reply.body],
      local: {},
    };
    if (reply.details !== undefined) draft.local = { details: reply.details };
    return draft;
  }

  // ---- encoder path --------------------------------------------------------------------------

  /**
   * Upstream's response passes back through ext_proc's encoder side unless processing is already
   * complete (Filter::encodeHeaders). A local reply (the router's 404 or 503, a buffer limit's 413)
   * does not: since 1.34 ext_proc ends its processing when told of a local reply (changelog
   * 1.34.0, "local replies were incorrectly sent to the ext_proc server", runtime guard
   * `skip_ext_proc_on_local_reply`, on by default; source/extensions/filters/http/ext_proc/ext_proc.cc,
   * `Filter::onLocalReply`), so the server hears
   * nothing more until the stream closes.
   */
  private async encode(draft: ResponseDraft): Promise<Encoded> {
    const s = this.session;
    if (!s || s.complete || draft.local) return { type: 'response', draft };
    const idle = s.checkIdle();
    if (idle?.type === 'local') return idle;
    if (s.complete) return { type: 'response', draft };

    const enc = s.encoding;
    const hasTrailers = draft.trailers !== undefined;
    const eos = !draft.bodyPresent && !hasTrailers;
    const status = (): number => Number(draft.headers.get(':status'));

    if (enc.bodyMode === 'FULL_DUPLEX_STREAMED') {
      const r = await this.duplex(s, {
        direction: 'response',
        dir: enc,
        headers: draft.headers,
        chunks: draft.chunks,
        bodyPresent: draft.bodyPresent,
        trailers: draft.trailers,
        applyHeaders: (cr) => this.applyCommon(s, cr, enc, draft.headers, draft),
      });
      if (r.type === 'local') return this.afterHeadersSent(r.reply, r.headersReleased, status());
      if (draft.bodyPresent && !draft.replaced) draft.body = r.body;
      return { type: 'response', draft };
    }

    if (enc.sendHeaders) {
      const p = s.send('response_headers', { response_headers: { headers: draft.headers.toProto(), end_of_stream: eos } }, eos);
      if (s.shouldRemoveContentLength(enc)) draft.headers.remove('content-length');
      const h = await s.awaitReply(p);
      if (h.type === 'local') return h;
      if (h.type === 'match') {
        const err = this.applyCommon(s, h.response.response_headers?.response, enc, draft.headers, draft);
        if (err) return s.processingError(err);
      }
    } else if (s.shouldRemoveContentLength(enc)) {
      draft.headers.remove('content-length');
    }

    const replaced = draft.replaced === true;
    // Headers reach the client now unless BUFFERED holds them for the body reply.
    const headersSent = s.complete || !draft.bodyPresent || replaced || enc.bodyMode !== 'BUFFERED';

    if (!s.complete && draft.bodyPresent && !replaced) {
      if (enc.bodyMode === 'BUFFERED' && !(draft.body.length === 0 && hasTrailers)) {
        if (draft.body.length > this.config.bufferLimitBytes) {
          s.finish();
          return { type: 'local', reply: localReply(500, Buffer.from('Internal Server Error'), 'response_payload_too_large') };
        }
        const beos = !hasTrailers;
        const h = await s.exchange('response_body', { response_body: { body: draft.body, end_of_stream: beos } }, beos);
        if (h.type === 'local') return h;
        const cr = h.type === 'match' ? h.response.response_body?.response : undefined;
        if (cr?.header_mutation) {
          const err = this.mutateHeaders(s, cr.header_mutation, draft.headers, false, s.shouldRemoveContentLength(enc));
          if (err) return s.processingError(err);
        }
        if (cr?.body_mutation) {
          const cl = draft.headers.get('content-length');
          if (cl !== undefined && /^\d+$/.test(cl) && Number(cl) !== mutatedSize(cr.body_mutation)) {
            return s.processingError(MISMATCH);
          }
          draft.body = applyBodyMutation(cr.body_mutation, draft.body);
        }
      } else if (enc.bodyMode === 'STREAMED') {
        const chunks = hasTrailers ? draft.chunks.filter((c) => c.length > 0) : draft.chunks;
        const pending = chunks.map((c, i) => {
          const ceos = i === chunks.length - 1 && !hasTrailers;
          return s.send('response_body', { response_body: { body: c, end_of_stream: ceos } }, ceos);
        });
        const out: Buffer[] = [];
        for (const [i, p] of pending.entries()) {
          const chunk = chunks[i] ?? Buffer.alloc(0);
          const h = await s.awaitReply(p);
          if (h.type === 'local') return this.afterHeadersSent(h.reply, true, status());
          const cr = h.type === 'match' ? h.response.response_body?.response : undefined;
          // As on the request path (handleStreamedBodyCallback): streamed_response is spurious here.
          if (cr?.body_mutation?.streamed_response) {
            const r = s.rejectSpurious('spurious message');
            if (r.type === 'local') return this.afterHeadersSent(r.reply, true, status());
            out.push(...chunks.slice(i));
            break;
          }
          out.push(cr?.body_mutation ? applyBodyMutation(cr.body_mutation, chunk) : chunk);
        }
        draft.body = Buffer.concat(out);
      }
    }

    if (draft.trailers && enc.sendTrailers && !s.complete) {
      const h = await s.exchange('response_trailers', { response_trailers: { trailers: draft.trailers.toProto() } });
      if (h.type === 'local') return this.afterHeadersSent(h.reply, headersSent, status());
      const tm = h.type === 'match' ? h.response.response_trailers?.header_mutation : undefined;
      const err = tm ? this.mutateHeaders(s, tm, draft.trailers, false, false) : undefined;
      if (err) return this.afterHeadersSent(s.processingError(err).reply, headersSent, status());
    }
    return { type: 'response', draft };
  }

  /** A local reply once the response headers went out can only reset the stream. */
  private afterHeadersSent(reply: LocalReply, headersSent: boolean, status: number): Encoded {
    if (headersSent) return { type: 'reset', details: reply.details ?? 'local_reply_after_headers', status };
    return { type: 'local', reply };
  }

  // ---- outcome -------------------------------------------------------------------------------

  private outcome(e: Encoded, cluster: string | undefined): Outcome {
    const s = this.session;
    const base: OutcomeBase = {
      requestHeaders: this.headers,
      routeCleared: this.routeCleared,
      messages: s ? s.messages : [],
      rejectedMutations: s ? s.stats.rejectedHeaderMutations : 0,
      spurious: s ? s.spurious : false,
      ...(s ? { stats: { ...s.stats } } : {}),
      ...(cluster !== undefined ? { cluster } : {}),
      dynamicMetadata: this.metadata.toJSON(),
    };
    if (e.type === 'reset') return { ...base, kind: 'reset', details: e.details, responseStatus: e.status };
    if (e.type === 'local') return localOutcome(base, e.reply.headers, e.reply.body, e.reply.details);
    const d = e.draft;
    if (d.local) return localOutcome(base, d.headers, d.body, d.local.details);
    return {
      ...base,
      kind: 'upstream',
      cluster: cluster ?? '',
      ...(this.endpoint !== undefined ? { endpoint: this.endpoint } : {}),
      requestBody: this.body,
      ...(this.trailers ? { requestTrailers: this.trailers } : {}),
      responseStatus: Number(d.headers.get(':status')),
      responseHeaders: d.headers,
      responseBody: d.body,
      ...(d.trailers ? { responseTrailers: d.trailers } : {}),
    };
  }
}

function localOutcome(base: OutcomeBase, headers: HeaderList, body: Buffer, details: string | undefined): Outcome {
  return {
    ...base,
    kind: 'local',
    status: Number(headers.get(':status')),
    headers,
    body,
    ...(details !== undefined ? { details } : {}),
  };
}

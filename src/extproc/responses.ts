/**
 * Builders for the replies kvgate sends. Envoy's rules they follow (external_processor.proto and
 * the ext_proc filter): header values go in `raw_value` (Envoy ignores `value`, and both set is an
 * error); `append` must be explicit and false to overwrite; `clear_route_cache` only works on a
 * request-path reply that also carries a header mutation.
 */
import type { ServiceDefinition } from '@grpc/grpc-js';
import type { CommonResponse, HeaderMutation, HttpStatusCode, ProcessingResponse } from './messages.js';
import { deepFreeze } from '../util/deep-freeze.js';
import { withResponseSerializer } from './proto.js';

/**
 * Replies that are the same on every request (the CONTINUEs, and the routing answer for a given
 * header and cluster) are built once, frozen, and encoded once: protobufjs's `fromObject` +
 * `encode` of a reply cost about as much as the rest of writing it. The serializer
 * (`withConstantReplies`) knows them by identity and hands grpc-js the bytes protobufjs produced
 * for that very object the first time (grpc-js copies them into its frame, never keeps them);
 * any other reply is encoded as before. Frozen, so no caller can change a shared reply: code that
 * needs a variant builds a new object.
 */
const encodedOnce = new WeakMap<object, Buffer | null>();

/** Marks a reply as constant: frozen, and encoded once by the serializer. */
function constantReply(msg: ProcessingResponse): Readonly<ProcessingResponse> {
  encodedOnce.set(deepFreeze(msg), null);
  return msg;
}

/** The service with its response serializer reusing the encoding of constant replies. */
export function withConstantReplies(def: ServiceDefinition): ServiceDefinition {
  return withResponseSerializer(def, (serialize) => (msg) => {
    if (msg === null || typeof msg !== 'object') return serialize(msg);
    const known = encodedOnce.get(msg);
    if (known) return known;
    const bytes = serialize(msg);
    // Only a constant's first encoding is kept, as a copy of its own: an inner serializer
    // may hand out a view of a buffer it reuses (./streamed-reply.ts does).
    if (known === null) encodedOnce.set(msg, Buffer.from(bytes));
    return bytes;
  });
}

export function setHeader(name: string, value: string): HeaderMutation['set_headers'] {
  return [{ header: { key: name, raw_value: Buffer.from(value, 'latin1') }, append: { value: false } }];
}

/** The routing answer: name the cluster in the routing header and make Envoy re-pick the route. */
export function routeTo(routingHeader: string, cluster: string): CommonResponse {
  return { status: 'CONTINUE', header_mutation: { set_headers: setHeader(routingHeader, cluster) }, clear_route_cache: true };
}

/**
 * Continue untouched, except that client-sent routing headers (`spoofed`: those present) never
 * survive. Removing them is not enough on its own: Envoy picked the route before ext_proc ran,
 * possibly on the spoofed header, so the reply also clears the route cache and the route is
 * picked again without it. Every request-path reply that mutates headers clears the cache.
 */
export function continueStripping(spoofed: readonly string[]): CommonResponse {
  return spoofed.length > 0
    ? { status: 'CONTINUE', header_mutation: { remove_headers: [...spoofed] }, clear_route_cache: true }
    : { status: 'CONTINUE' };
}

export const CONTINUE: Readonly<CommonResponse> = deepFreeze({ status: 'CONTINUE' });

/** The bare CONTINUE reply to each kind of message (frozen; encoded once). */
export const CONTINUE_REPLY = {
  request_headers: constantReply({ request_headers: { response: CONTINUE } }),
  request_body: constantReply({ request_body: { response: CONTINUE } }),
  response_headers: constantReply({ response_headers: { response: CONTINUE } }),
  response_body: constantReply({ response_body: { response: CONTINUE } }),
} as const;

/** Bounds the routing replies kept: clusters come from the config, so this is never reached in practice. */
const MAX_ROUTE_REPLIES = 4096;
const routeReplies = new Map<string, Readonly<ProcessingResponse>>();

/**
 * The reply to `phase` naming `cluster` in `routingHeader` (`routeTo` as that phase's reply): one
 * frozen object per phase, header and cluster, encoded once.
 */
export function routeReply(phase: 'request_headers' | 'request_body', routingHeader: string, cluster: string): Readonly<ProcessingResponse> {
  const key = `${phase}\u0000${routingHeader}\u0000${cluster}`;
  let reply = routeReplies.get(key);
  if (reply === undefined) {
    if (routeReplies.size >= MAX_ROUTE_REPLIES) routeReplies.clear();
    const response = routeTo(routingHeader, cluster);
    reply = constantReply(phase === 'request_headers' ? { request_headers: { response } } : { request_body: { response } });
    routeReplies.set(key, reply);
  }
  return reply;
}

export function immediate(
  status: number,
  /** OpenAI's error shape; `class` names the class of service a shed request had. */
  body: { message: string; type: string; code: string; class?: string },
  details: string,
  retryAfterS?: number,
): ProcessingResponse {
  const headers = [
    { header: { key: 'content-type', raw_value: Buffer.from('application/json') }, append: { value: false } },
  ];
  if (retryAfterS !== undefined) {
    headers.push({ header: { key: 'retry-after', raw_value: Buffer.from(String(retryAfterS)) }, append: { value: false } });
  }
  return {
    immediate_response: {
      // The enum's numbers are the HTTP status codes.
      status: { code: status as HttpStatusCode },
      headers: { set_headers: headers },
      body: Buffer.from(JSON.stringify({ error: body })),
      // Shows up as %RESPONSE_CODE_DETAILS% in Envoy's access log.
      details,
    },
  };
}

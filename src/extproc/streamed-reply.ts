/**
 * The full-duplex echo's reply, `streamed_response`, encoded by hand. Every byte of a
 * FULL_DUPLEX_STREAMED body comes back to Envoy in one (a 400 KB request body is seven of them),
 * and protobufjs would build each from objects into a buffer of its own, only for grpc-js to copy
 * that buffer at once into the framed message it sends (server-interceptors.js,
 * `serializeMessage`). Here the few bytes of framing around the body are written directly, into
 * one buffer kept for the purpose and reused by the next reply: a 64 KiB allocation outside V8's
 * heap less per chunk, and outside allocations are what set off V8's full collections.
 *
 * Only a reply of exactly this shape takes this path; anything else, or a reply carrying any other
 * field, goes through protobufjs as before. The bytes are protobufjs's own (a test compares them).
 *
 *   ProcessingResponse { request_body (3) | response_body (4): BodyResponse {
 *     response (1): CommonResponse { body_mutation (3): BodyMutation {
 *       streamed_response (3): StreamedBodyResponse { body (1), end_of_stream (2) } } } } }
 */
import type { ServiceDefinition } from '@grpc/grpc-js';
import { withResponseSerializer } from './proto.js';

/** The reply's parts when it is a bare streamed_response, else undefined. */
function streamedShape(msg: unknown): { field: 3 | 4; body: Uint8Array; eos: boolean } | undefined {
  if (msg === null || typeof msg !== 'object') return undefined;
  const keys = Object.keys(msg);
  if (keys.length !== 1) return undefined;
  const field = keys[0] === 'request_body' ? 3 : keys[0] === 'response_body' ? 4 : undefined;
  if (field === undefined) return undefined;
  const response = only((msg as Record<string, unknown>)[keys[0]!], 'response');
  const mutation = only(response, 'body_mutation');
  const streamed = only(mutation, 'streamed_response');
  if (streamed === undefined || streamed === null || typeof streamed !== 'object') return undefined;
  const s = streamed as Record<string, unknown>;
  for (const k of Object.keys(s)) if (k !== 'body' && k !== 'end_of_stream') return undefined;
  const body = s['body'] ?? new Uint8Array(0);
  const eos = s['end_of_stream'] ?? false;
  if (!(body instanceof Uint8Array) || typeof eos !== 'boolean') return undefined;
  return { field, body, eos };
}

/** `v[key]` when `v` is an object with that key alone. */
function only(v: unknown, key: string): unknown {
  if (v === null || typeof v !== 'object') return undefined;
  const keys = Object.keys(v);
  return keys.length === 1 && keys[0] === key ? (v as Record<string, unknown>)[key] : undefined;
}

function varintBytes(n: number): number {
  let bytes = 1;
  while (n >= 0x80) {
    n = Math.floor(n / 0x80);
    bytes++;
  }
  return bytes;
}

function writeVarint(out: Buffer, at: number, n: number): number {
  while (n >= 0x80) {
    out[at++] = (n % 0x80) | 0x80;
    n = Math.floor(n / 0x80);
  }
  out[at++] = n;
  return at;
}

let scratch = Buffer.allocUnsafe(0);

/**
 * The encoded reply, in the reused buffer: valid only until the next call. grpc-js copies it
 * into its framed message before it returns from `serializeMessage`, so that is long enough.
 */
export function encodeStreamedReply(field: 3 | 4, body: Uint8Array, eos: boolean): Buffer {
  // Innermost first: each message's length is known once the one inside it is.
  // protobufjs writes both fields even at their defaults (an empty body, false): so does this.
  const streamed = 1 + varintBytes(body.length) + body.length + 2;
  const mutation = 1 + varintBytes(streamed) + streamed;
  const common = 1 + varintBytes(mutation) + mutation;
  const response = 1 + varintBytes(common) + common;
  const total = 1 + varintBytes(response) + response;
  if (scratch.length < total) scratch = Buffer.allocUnsafe(Math.max(total, 2 * scratch.length));
  const out = scratch;
  let at = 0;
  out[at++] = (field << 3) | 2;
  at = writeVarint(out, at, response);
  out[at++] = (1 << 3) | 2; // BodyResponse.response
  at = writeVarint(out, at, common);
  out[at++] = (3 << 3) | 2; // CommonResponse.body_mutation
  at = writeVarint(out, at, mutation);
  out[at++] = (3 << 3) | 2; // BodyMutation.streamed_response
  at = writeVarint(out, at, streamed);
  out[at++] = (1 << 3) | 2; // StreamedBodyResponse.body
  at = writeVarint(out, at, body.length);
  out.set(body, at);
  at += body.length;
  out[at++] = 2 << 3; // StreamedBodyResponse.end_of_stream
  out[at++] = eos ? 1 : 0;
  return out.subarray(0, at);
}

/** The service with its response serializer taking the hand-encoded path for bare streamed replies. */
export function withStreamedReplies(def: ServiceDefinition): ServiceDefinition {
  return withResponseSerializer(def, (serialize) => (msg) => {
    const s = streamedShape(msg);
    return s ? encodeStreamedReply(s.field, s.body, s.eos) : serialize(msg);
  });
}

/**
 * How a stream's bodies are handled, from the body modes Envoy declares for it.
 *
 * Envoy 1.35+ sends `protocol_config` (its filter's request and response body modes) on the first
 * message of every stream (ext_proc.cc `encodeProtocolConfig`); kvgate follows it, so a platform
 * team changes the mode in Envoy's config alone. Older Envoys send nothing, and
 * `routing.request_body_mode` / `routing.response_body_mode` say what the filter is configured
 * with (FULL_DUPLEX_STREAMED predates protocol_config, so an Envoy may run it without declaring it).
 *
 *  - buffered: BUFFERED (one message with the whole body; Envoy holds the headers until its reply)
 *    and BUFFERED_PARTIAL (the same, for what fits in Envoy's buffer): decide on the body reply.
 *    In BUFFERED_PARTIAL a body past the buffer comes cut (see `partialBody`).
 *  - streamed / none: the headers go upstream at the headers reply: decide there.
 *  - full_duplex: FULL_DUPLEX_STREAMED: chunks arrive without waiting for replies; kvgate answers
 *    the headers once it has what it needs, then sends the body back as `streamed_response` chunks.
 */
import type { Config } from '../config/schema.js';
import type { BodySendMode, ProtocolConfiguration } from './messages.js';

export type RequestBodyHandling = Config['routing']['request_body_mode'];
type Configured = Pick<Config['routing'], 'request_body_mode' | 'response_body_mode'>;

export interface BodyModes {
  request: RequestBodyHandling;
  /**
   * Envoy declared BUFFERED_PARTIAL: a body message without end_of_stream may be only the first
   * part of the body (see `partialBody`).
   */
  partialBodies: boolean;
  /** Response bodies come as FULL_DUPLEX_STREAMED chunks (answered with streamed_response). */
  responseFullDuplex: boolean;
  /** What Envoy declared, when it did (for logs). */
  declared?: { request: BodySendMode; response: BodySendMode };
}

/**
 * Largest `streamed_response` chunk kvgate sends: Envoy's API recommends at most 64 KiB per
 * chunk, so a large body flows through Envoy's filter chain in pieces it handles well.
 */
export const STREAMED_CHUNK_BYTES = 64 * 1024;

function requestHandling(mode: BodySendMode): RequestBodyHandling | undefined {
  switch (mode) {
    case 'BUFFERED':
    case 'BUFFERED_PARTIAL':
      return 'buffered';
    case 'STREAMED':
      return 'streamed';
    case 'NONE':
      return 'none';
    case 'FULL_DUPLEX_STREAMED':
      return 'full_duplex';
    default:
      // GRPC is not implemented in Envoy; an unknown number from a newer Envoy is not understood.
      return undefined;
  }
}

/** The stream's body modes: Envoy's declaration when there is one, else the config's fallback. */
export function bodyModes(pc: ProtocolConfiguration | null | undefined, configured: Configured): BodyModes {
  if (!pc) return { request: configured.request_body_mode, partialBodies: false, responseFullDuplex: configured.response_body_mode === 'full_duplex' };
  const declared = { request: pc.request_body_mode, response: pc.response_body_mode };
  return {
    request: requestHandling(pc.request_body_mode) ?? configured.request_body_mode,
    partialBodies: pc.request_body_mode === 'BUFFERED_PARTIAL',
    responseFullDuplex: pc.response_body_mode === 'FULL_DUPLEX_STREAMED',
    declared,
  };
}

/**
 * Whether a buffered body message is only the first part of the body. BUFFERED sends the whole
 * body, with end_of_stream false only when trailers follow. BUFFERED_PARTIAL sends what it holds
 * either at the end of the body or once its buffer passes its high watermark
 * (ext_proc.cc `handleDataBufferedPartialMode`, `sendStreamChunk`: end_of_stream false), and the
 * rest of the body then goes upstream unprocessed; with trailers it also sends the whole body
 * without end_of_stream (`onTrailers`). A `content-length` tells the two apart; without one, a
 * declared BUFFERED_PARTIAL is taken at its word that the body may be cut (trailers on an LLM
 * request are rarer than a prompt past Envoy's buffer).
 */
export function partialBody(bodyBytes: number, endOfStream: boolean, declaredBytes: number | undefined, modes: BodyModes): boolean {
  if (endOfStream) return false;
  return declaredBytes !== undefined ? bodyBytes < declaredBytes : modes.partialBodies;
}

/** A `content-length` value as a byte count, or undefined when absent or not a plain decimal. */
export function declaredLength(value: string | undefined): number | undefined {
  if (value === undefined || !/^\d{1,15}$/.test(value)) return undefined;
  return Number(value);
}

/** Whether Envoy's declared request body mode differs from what the config says (worth one log line). */
export function modeMismatch(modes: BodyModes, configured: Config['routing']['request_body_mode']): boolean {
  return modes.declared !== undefined && modes.request !== configured;
}

/** A body cut into `streamed_response` chunks of at most STREAMED_CHUNK_BYTES (views, no copies). */
export function streamedChunks(body: Buffer): Buffer[] {
  const out: Buffer[] = [];
  for (let at = 0; at < body.length; at += STREAMED_CHUNK_BYTES) out.push(body.subarray(at, Math.min(body.length, at + STREAMED_CHUNK_BYTES)));
  return out;
}

/**
 * What streamedChunks cuts from the chunks joined, without joining them: a piece that lies in one
 * chunk is a view of it, and only a piece that spans chunks is copied (into a buffer of its own
 * size). Chunks of exactly STREAMED_CHUNK_BYTES (what the bench sends) are never copied.
 */
export function streamedPieces(chunks: readonly Buffer[]): Buffer[] {
  const out: Buffer[] = [];
  let parts: Buffer[] = [];
  let size = 0;
  for (const chunk of chunks) {
    for (let at = 0; at < chunk.length; ) {
      const take = Math.min(STREAMED_CHUNK_BYTES - size, chunk.length - at);
      parts.push(chunk.subarray(at, at + take));
      size += take;
      at += take;
      if (size === STREAMED_CHUNK_BYTES) {
        out.push(parts.length === 1 ? parts[0]! : Buffer.concat(parts, size));
        parts = [];
        size = 0;
      }
    }
  }
  if (size > 0) out.push(parts.length === 1 ? parts[0]! : Buffer.concat(parts, size));
  return out;
}

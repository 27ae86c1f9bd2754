/**
 * Builders for the replies kvgate sends. Envoy's rules they follow (external_processor.proto and
 * the ext_proc filter): header values go in `raw_value` (Envoy ignores `value`, and both set is an
 * error); `append` must be explicit and false to overwrite; `clear_route_cache` only works on a
 * request-path reply that also carries a header mutation.
 */
import type { CommonResponse, HeaderMutation, HttpStatusCode, ProcessingResponse } from './messages.js';

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

export const CONTINUE: CommonResponse = { status: 'CONTINUE' };

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

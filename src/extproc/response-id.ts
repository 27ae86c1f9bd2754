/**
 * The id of a Responses API response, read from the first bytes of its body as the worker sends
 * it: a JSON object (`{"id": "resp_…", …}`) or server-sent events whose first event carries the
 * response object (`data: {"type": "response.created", "response": {"id": "resp_…", …}}`). In both
 * the first `"id"` member is the response's (engines write it first; items come later), so no
 * JSON parser is needed and a partial first chunk is enough. Untrusted bytes: it never throws, and
 * gives up after a bounded prefix.
 */

/** Bytes read before giving up: the id sits in the first few hundred of every shape seen. */
export const MAX_ID_SCAN_BYTES = 16 * 1024;

/** Longest id kept (engines use ~40 characters); a longer "id" is not one of theirs. */
const ID = /"id"\s*:\s*"([^"\\\r\n]{1,256})"/;

export class ResponseIdReader {
  private text = '';
  private bytes = 0;

  /** Feeds the next chunk: the id once found, 'more' while it may still come, 'none' when it will not. */
  feed(chunk: Uint8Array | undefined): { id: string } | 'more' | 'none' {
    if (chunk && chunk.length > 0) {
      const room = MAX_ID_SCAN_BYTES - this.bytes;
      const part = chunk.length > room ? chunk.subarray(0, room) : chunk;
      // latin1 maps every byte to one character: ids are ASCII, and nothing here can throw.
      this.text += Buffer.from(part.buffer, part.byteOffset, part.byteLength).toString('latin1');
      this.bytes += part.length;
    }
    const m = ID.exec(this.text);
    if (m) return { id: m[1]! };
    return this.bytes >= MAX_ID_SCAN_BYTES ? 'none' : 'more';
  }
}

/** Whether a response's headers promise a body kvgate can read an id from: a success, not compressed. */
export function readableResponse(headers: ReadonlyMap<string, string>): boolean {
  const status = Number(headers.get(':status'));
  if (!(status >= 200 && status < 300)) return false;
  const encoding = headers.get('content-encoding');
  return encoding === undefined || encoding === '' || encoding.toLowerCase() === 'identity';
}

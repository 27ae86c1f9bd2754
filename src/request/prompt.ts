/**
 * Canonical prompt text: the prompt as the model will see it, flattened to one string, so that two
 * requests whose prompts begin alike produce text that begins alike. Roles and message boundaries
 * are kept (a system prompt and a user message with the same words are different prefixes).
 */

/**
 * Between parts: ASCII RS (record separator), which prompts rarely carry and which only needs to be
 * stable. One byte on purpose: a character above U+00FF (U+241E, used before) made V8 store the
 * whole canonical prompt as a two-byte string, and joining 400 KB cost 3x as much.
 */
const SEP = '\u001e';

/**
 * Canonical text of an OpenAI chat or completions body, or undefined when it carries no prompt.
 * Stops adding parts once it has `maxChars` characters (keys read only a prefix): a body of a
 * million tiny messages or token ids then costs what its prefix costs, not a string per element.
 */
export function canonicalPrompt(body: Record<string, unknown>, maxChars = Infinity): string | undefined {
  const parts: string[] = [];
  let length = 0;
  const full = (part: string) => {
    parts.push(part);
    length += part.length + SEP.length;
    return length >= maxChars;
  };
  // Tool definitions are rendered into the prompt ahead of the conversation by chat templates.
  if (Array.isArray(body['tools']) && body['tools'].length > 0 && full(`tools${SEP}${stableJson(body['tools'])}`)) return parts.join(SEP);
  if (Array.isArray(body['messages'])) {
    for (const m of body['messages']) {
      if (m === null || typeof m !== 'object') continue;
      const msg = m as Record<string, unknown>;
      const role = typeof msg['role'] === 'string' ? msg['role'] : '';
      if (full(`${role}${SEP}${contentText(msg['content'])}`)) break;
    }
  } else if (body['prompt'] !== undefined) {
    const p = body['prompt'];
    if (typeof p === 'string') parts.push(p);
    // Joined with SEP like the parts themselves, so one part per element gives the same text.
    else if (Array.isArray(p)) {
      for (const x of p) if (full(typeof x === 'string' ? x : stableJson(x))) break;
    } else return undefined;
  }
  return parts.length > 0 ? parts.join(SEP) : undefined;
}

/** Message content: a string, or an array of parts of which text parts count (images by reference). */
function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return content === undefined || content === null ? '' : stableJson(content);
  return content
    .map((part) => {
      if (part === null || typeof part !== 'object') return typeof part === 'string' ? part : '';
      const p = part as Record<string, unknown>;
      if (typeof p['text'] === 'string') return p['text'];
      return stableJson(p);
    })
    .join('');
}

/** JSON.stringify that never throws (bodies came from JSON.parse, so no cycles or BigInts). */
function stableJson(v: unknown): string {
  try {
    return JSON.stringify(v) ?? '';
  } catch {
    return '';
  }
}

/**
 * Header mutation as Envoy applies it:
 *  - `checkMutation` mirrors Filters::Common::MutationRules::Checker (mutation_rules.cc);
 *  - `applyExtProcHeaderMutation` mirrors ext_proc's MutationUtils::applyHeaderMutations
 *    (source/extensions/filters/http/ext_proc/mutation_utils.cc), its header-limit checks included;
 *  - `applyRequestMutations` mirrors the envoy.filters.http.header_mutation filter.
 */
import type { ReceivedHeaderMutation as HeaderMutation } from '../../src/extproc/messages.js';
import type { HeaderLimits, MutationRules, RequestMutation, StringMatcher } from './envoy-config.js';
import type { HeaderList } from './header-list.js';

export type CheckOperation = 'set' | 'append' | 'remove';
export type CheckResult = 'ok' | 'ignore' | 'fail';

/** Headers that pick the route or upstream; only allow_all_routing lets ext_proc touch them. */
const ROUTING_HEADERS = new Set(['host', ':authority', ':method', ':scheme']);

/** RFC 7230 token characters (HeaderUtility::headerNameIsValid for non-pseudo headers). */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

export function headerNameIsValid(name: string): boolean {
  return name.startsWith(':') ? TOKEN.test(name.slice(1)) : TOKEN.test(name);
}

/** nghttp2_check_header_value: HTAB, SP, VCHAR and obs-text; no NUL, CR, LF or other controls. */
export function headerValueIsValid(value: Buffer): boolean {
  for (const b of value) {
    if (b !== 0x09 && (b < 0x20 || b === 0x7f)) return false;
  }
  return true;
}

/** Checker::isValidValue: extra checks for headers that would make Envoy misbehave. */
function isValidValue(name: string, value: Buffer): boolean {
  if (!name.startsWith(':') && !headerValueIsValid(value)) return false;
  const text = value.toString('latin1');
  if ((name === 'host' || name === ':authority') && !/^[A-Za-z0-9\-._~!$&'()*+,;=:[\]@%]+$/.test(text)) return false;
  if (name === ':scheme' && !/^https?$/i.test(text)) return false;
  if (name === ':status') {
    if (!/^\d+$/.test(text) || Number(text) < 200) return false;
  }
  return true;
}

function isAllowed(rules: MutationRules, envoyPrefix: string, op: CheckOperation, name: string): boolean {
  // "No matter what, you can't remove the host or any ':' headers."
  if (op === 'remove' && (name === 'host' || name.startsWith(':'))) return false;
  if (rules.disallowExpression?.test(name)) return false;
  if (rules.allowExpression?.test(name)) return true;
  if (rules.disallowAll) return false;
  if (!rules.allowAllRouting && ROUTING_HEADERS.has(name)) return false;
  // System headers hold one value: appending to one is never allowed.
  if (name.startsWith(':') && (op === 'append' || rules.disallowSystem)) return false;
  if (!rules.allowEnvoy && name.startsWith(envoyPrefix)) return false;
  return true;
}

export function checkMutation(
  rules: MutationRules,
  envoyPrefix: string,
  op: CheckOperation,
  name: string,
  value: Buffer,
): CheckResult {
  if (isAllowed(rules, envoyPrefix, op, name) && (op === 'remove' || isValidValue(name, value))) return 'ok';
  return rules.disallowIsError ? 'fail' : 'ignore';
}

export interface ApplyOptions {
  rules: MutationRules;
  envoyPrefix: string;
  /** CONTINUE_AND_REPLACE: a `:method` change is force-allowed (compatibility rule in Envoy). */
  replacingMessage: boolean;
  /** Modes where Envoy drops content-length also drop any content-length the server sets. */
  removeContentLength: boolean;
  onRejected: () => void;
  /**
   * The target header map's limits (the request headers: the HCM's), checked before and after the
   * mutation; undefined where the harness does not model them (response headers, trailers, local
   * replies).
   */
  limits?: HeaderLimits;
}

/**
 * Applies a HeaderMutation from an ext_proc reply. Returns an error message (which Envoy turns
 * into a local reply with status_on_error, whatever failure_mode_allow says) or undefined.
 *
 * Only `raw_value` is read: a header with just `value` gets an empty value (Envoy issue #31555);
 * both set is an error. Only the deprecated `append` BoolValue counts (absent/false = overwrite
 * the first occurrence, true = add); `append_action` is ignored by ext_proc (issue #36982).
 */
export function applyExtProcHeaderMutation(
  mutation: HeaderMutation,
  headers: HeaderList,
  opts: ApplyOptions,
): string | undefined {
  const limits = opts.limits;
  // MutationUtils::responseHeaderSizeCheck: more remove or set entries than the map may hold
  // headers is refused before anything is applied.
  if (limits) {
    const removes = mutation.remove_headers?.length ?? 0;
    const sets = mutation.set_headers?.length ?? 0;
    if (removes > limits.maxHeadersCount || sets > limits.maxHeadersCount) {
      opts.onRejected();
      return `Header mutation remove header count ${removes} or set header count ${sets} exceed the HCM header countlimit ${limits.maxHeadersCount}`;
    }
  }
  for (const raw of mutation.remove_headers ?? []) {
    if (!headerNameIsValid(raw)) {
      opts.onRejected();
      return 'Invalid character in remove_headers mutation.';
    }
    const name = raw.toLowerCase();
    const result = checkMutation(opts.rules, opts.envoyPrefix, 'remove', name, Buffer.alloc(0));
    if (result === 'ok') headers.remove(name);
    else {
      opts.onRejected();
      if (result === 'fail') return `Invalid attempt to remove ${name}`;
    }
  }

  for (const sh of mutation.set_headers ?? []) {
    const h = sh.header as typeof sh.header | null | undefined;
    if (!h) continue;
    const raw = Buffer.from(h.raw_value ?? Buffer.alloc(0));
    if ((h.value ?? '') !== '' && raw.length > 0) {
      opts.onRejected();
      return 'Only one of value or raw_value in the HeaderValue message should be set.';
    }
    if (!headerNameIsValid(h.key) || !headerValueIsValid(raw)) {
      opts.onRejected();
      return 'Invalid character in set_headers mutation.';
    }
    const name = h.key.toLowerCase();
    if (opts.removeContentLength && name === 'content-length') continue;
    const append = sh.append?.value === true;
    const op: CheckOperation = append && headers.has(name) ? 'append' : 'set';
    let result = checkMutation(opts.rules, opts.envoyPrefix, op, name, raw);
    if (opts.replacingMessage && name === ':method') result = 'ok';
    if (result === 'ok') {
      if (append) headers.add(name, raw);
      else headers.setCopy(name, raw);
    } else {
      opts.onRejected();
      if (result === 'fail') return `Invalid attempt to modify ${name}`;
    }
  }
  // MutationUtils::headerMutationResultCheck: the map after the mutation must still fit the
  // limits the codec enforced on the way in. A request that arrived at the count limit (Envoy's
  // own x-forwarded-proto and x-request-id count too) fails here when a header is added: a local
  // reply with status_on_error, whatever failure_mode_allow says.
  if (limits && (headers.byteSize > limits.maxHeadersKb * 1024 || headers.size > limits.maxHeadersCount)) {
    opts.onRejected();
    return `Header mutation causes end result header count ${headers.size} or header size ${headers.byteSize} bytes, exceeding the count limit ${limits.maxHeadersCount} or the size limit ${limits.maxHeadersKb} kilobytes`;
  }
  return undefined;
}

export function stringMatches(m: StringMatcher, input: string): boolean {
  if (m.kind === 'regex') return m.regex?.test(input) ?? false;
  const a = m.ignoreCase ? input.toLowerCase() : input;
  const b = m.ignoreCase ? m.value.toLowerCase() : m.value;
  switch (m.kind) {
    case 'exact':
      return a === b;
    case 'prefix':
      return a.startsWith(b);
    case 'suffix':
      return a.endsWith(b);
    case 'contains':
      return a.includes(b);
  }
}

/** envoy.filters.http.header_mutation request_mutations, in order (HeaderMutations::evaluateHeaders). */
export function applyRequestMutations(mutations: RequestMutation[], headers: HeaderList): void {
  for (const m of mutations) {
    switch (m.kind) {
      case 'remove':
        headers.remove(m.name);
        break;
      case 'remove_on_match':
        headers.removeIf((name) => stringMatches(m.matcher, name));
        break;
      case 'append': {
        if (m.value === '' && !m.keepEmptyValue) break;
        const present = headers.has(m.name);
        if (m.action === 'APPEND_IF_EXISTS_OR_ADD') headers.add(m.name, m.value);
        else if (m.action === 'ADD_IF_ABSENT' && !present) headers.add(m.name, m.value);
        else if (m.action === 'OVERWRITE_IF_EXISTS_OR_ADD') headers.replaceAll(m.name, m.value);
        else if (m.action === 'OVERWRITE_IF_EXISTS' && present) headers.replaceAll(m.name, m.value);
        break;
      }
    }
  }
}

/**
 * Freezes a value and everything it holds, for values shared by many readers that none may change
 * (the config, the constant ext_proc replies). Byte arrays (Buffers and other typed arrays) are
 * left as they are: `Object.freeze` throws on one with elements, and a reply's header values are
 * Buffers.
 */
export function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !ArrayBuffer.isView(value)) {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}

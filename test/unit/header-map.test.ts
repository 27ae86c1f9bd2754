/**
 * The ext_proc header readers (src/extproc/headers.ts) against the simple forms they replaced on
 * the request path: header values read as latin1 in place instead of through a copy
 * (`Buffer.from(raw)`), and the spoofed routing headers found without a set. Any header list
 * fast-check makes (values as Buffers, as views into a larger buffer at an offset, as plain
 * Uint8Arrays; empty and absent raw values; mixed-case and repeated names; every byte value; a
 * spoof among them or not) must read the same. And the route knobs read from only the call
 * metadata's knob entries must be the knobs read from all of them.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { Metadata } from '@grpc/grpc-js';
import { readKnobs } from '../../src/config/knobs.js';
import { knobMetadataEntries } from '../../src/extproc/knob-source.js';
import { parseConfig } from '../../src/config/load.js';
import { headerMapToMap, MAX_HEADERS, routingOutputHeaders, spoofedRoutingHeaders } from '../../src/extproc/headers.js';
import type { HeaderMap } from '../../src/extproc/messages.js';

function referenceMap(map: HeaderMap | null | undefined): Map<string, string> {
  const out = new Map<string, string>();
  const list = map?.headers ?? [];
  for (let i = 0; i < list.length && i < MAX_HEADERS; i++) {
    const h = list[i]!;
    if (typeof h.key !== 'string' || h.key === '') continue;
    const name = h.key.toLowerCase();
    if (out.has(name)) continue;
    const raw = h.raw_value;
    out.set(name, raw && raw.length > 0 ? Buffer.from(raw).toString('latin1') : (h.value ?? ''));
  }
  return out;
}

function referenceSpoofed(map: HeaderMap | null | undefined, outputs: string[]): string[] {
  const found = new Set<string>();
  for (const h of map?.headers ?? []) {
    if (typeof h.key !== 'string') continue;
    const name = h.key.toLowerCase();
    if (outputs.includes(name)) found.add(name);
  }
  return [...found];
}

const name = fc.constantFrom('x-worker', 'X-Worker', 'x-gateway-destination-endpoint', ':path', 'content-type', 'X-Session-Id', 'a', '');
const bytes = fc.uint8Array({ maxLength: 40 });
/** A value as grpc-js hands it (a Buffer, often a view into the message's buffer) or as a caller might. */
const raw = fc.oneof(
  bytes.map((b) => Buffer.from(b)),
  fc.tuple(bytes, fc.nat(7), fc.nat(7)).map(([b, pre, post]) => {
    const whole = Buffer.alloc(pre + b.length + post, 0x41);
    whole.set(b, pre);
    return whole.subarray(pre, pre + b.length);
  }),
  fc.tuple(bytes, fc.nat(5)).map(([b, pre]) => {
    const whole = new Uint8Array(pre + b.length);
    whole.set(b, pre);
    return new Uint8Array(whole.buffer, pre, b.length);
  }),
);
const header = fc.record({ key: name, value: fc.string({ maxLength: 8 }), raw_value: fc.option(raw, { nil: undefined }) });
const headerMap = fc.array(header, { maxLength: 30 }).map((headers) => ({ headers }) as unknown as HeaderMap);

describe('ext_proc header readers', () => {
  test('headerMapToMap reads every value as the copying reader did', () => {
    fc.assert(
      fc.property(headerMap, (map) => {
        assert.deepEqual([...headerMapToMap(map)], [...referenceMap(map)]);
      }),
      { numRuns: 500 },
    );
    assert.deepEqual([...headerMapToMap(undefined)], []);
    assert.deepEqual([...headerMapToMap(null)], []);
  });

  test('every byte value reads as its latin1 character, from a view at an offset too', () => {
    const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    const view = Buffer.concat([Buffer.from('prefix'), all]).subarray(6);
    const map = { headers: [{ key: 'x-bytes', value: '', raw_value: view }] } as unknown as HeaderMap;
    assert.equal(headerMapToMap(map).get('x-bytes'), all.toString('latin1'));
  });

  test('spoofedRoutingHeaders finds the same client-sent routing headers, once each, in order', () => {
    const configs = [
      parseConfig({ workers: [{ id: 'w', cluster: 'c' }] }),
      parseConfig({ routing: { protocol: 'endpoint_picker' }, workers: [{ id: 'w', address: '10.0.0.1:8000' }] }),
    ];
    for (const config of configs) {
      const outputs = routingOutputHeaders(config);
      fc.assert(
        fc.property(headerMap, (map) => {
          assert.deepEqual(spoofedRoutingHeaders(map, config), referenceSpoofed(map, outputs));
        }),
        { numRuns: 300 },
      );
      const spoof = { headers: [{ key: outputs[0]!.toUpperCase(), value: 'x', raw_value: Buffer.from('x') }, { key: outputs[0]!, value: 'y', raw_value: Buffer.alloc(0) }] } as unknown as HeaderMap;
      assert.deepEqual(spoofedRoutingHeaders(spoof, config), outputs, 'a spoof in any case is found, once');
      assert.deepEqual(spoofedRoutingHeaders(undefined, config), []);
    }
  });
});

/** The call metadata as the stream read it before: every text entry, lower-case keys. */
function allEntries(md: Metadata): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (const [key, value] of Object.entries(md.getMap())) if (typeof value === 'string') out.push([key.toLowerCase(), value]);
  return out;
}

describe('knobs from call metadata', () => {
  test('reading only the knob entries gives the reading of every entry (values, problems, layers)', () => {
    const key = fc.constantFrom('x-kvgate-policy', 'x-kvgate-max-inflight', 'x-kvgate-pool', 'x-kvgate-nope', 'x-kvgate-', 'x-other', 'user-agent', 'x-kvgate-x-bin', 'traceparent', 'X-KVGATE-POLICY');
    const value = fc.constantFrom('prefix', 'session', 'both', '7', '-1', 'abc', '', 'default');
    fc.assert(
      fc.property(fc.array(fc.tuple(key, value), { maxLength: 12 }), fc.option(fc.dictionary(fc.constantFrom('policy', 'pool', 'bogus'), value), { nil: undefined }), (pairs, context) => {
        const md = new Metadata();
        for (const [k, v] of pairs) {
          if (k.endsWith('-bin')) md.add(k, Buffer.from(v));
          else md.add(k, v);
        }
        const entries = knobMetadataEntries(md);
        assert.ok(entries.every(([k]) => k.startsWith('x-kvgate-')), "entries.every(([k]) => k.startsWith('x-kvgate-'))");
        assert.deepEqual(readKnobs({ metadata: entries, ...(context ? { context } : {}) }), readKnobs({ metadata: allEntries(md), ...(context ? { context } : {}) }));
      }),
      { numRuns: 300 },
    );
    assert.deepEqual(knobMetadataEntries(undefined), []);
  });
});

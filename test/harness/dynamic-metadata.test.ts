/**
 * The harness's dynamic metadata follows Envoy's ext_proc rules: only forwarding namespaces go
 * out in metadata_context; only receiving namespaces holding Structs come back in.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DynamicMetadata, fromPbStruct, toPbStruct } from './dynamic-metadata.js';

test('forwards only the listed namespaces, and receives only listed namespaces holding Structs', () => {
  const md = new DynamicMetadata({ 'envoy.lb.subset_hint': { s: ['10.0.0.1:80'] }, secret: { k: 'v' } });
  const ctx = md.context(['envoy.lb.subset_hint', 'envoy.lb']);
  assert.deepEqual(Object.keys(ctx.filter_metadata), ['envoy.lb.subset_hint']);
  assert.deepEqual(fromPbStruct(ctx.filter_metadata['envoy.lb.subset_hint']), { s: ['10.0.0.1:80'] });
  const reply = toPbStruct({ 'envoy.lb': { e: '10.0.0.1:80' }, other: { x: 1 }, 'envoy.flat': 'not a struct' });
  const dropped = md.receive(reply, ['envoy.lb', 'envoy.flat']);
  assert.deepEqual(dropped.sort(), ['envoy.flat', 'other']);
  assert.deepEqual(md.toJSON()['envoy.lb'], { e: '10.0.0.1:80' });
  md.merge('envoy.lb', { served: '10.0.0.2:80' });
  assert.deepEqual(md.toJSON()['envoy.lb'], { e: '10.0.0.1:80', served: '10.0.0.2:80' }, 'keys merge into the namespace');
});

/** routing.protocol: each protocol needs its own way of naming a worker, and says so precisely. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseConfig } from '../../src/config/load.js';
import { isEndpointAddress } from '../../src/config/schema.js';
import { subsetHint, workerAt, workersAt } from '../../src/extproc/endpoint-picker.js';

test('endpoint_picker needs a unique ip:port per worker; cluster_header needs a cluster', () => {
  const ok = parseConfig({ routing: { protocol: 'endpoint_picker' }, workers: [{ id: 'a', address: '10.0.0.1:8000' }, { id: 'b', address: '[fd00::2]:8000' }] });
  assert.deepEqual(ok.workers.map((w) => w.cluster), ['a', 'b'], 'the id stands in for a cluster');
  assert.equal(parseConfig({ workers: [{ id: 'a', cluster: 'ca' }] }).routing.protocol, 'cluster_header', 'the default');
  assert.throws(
    () =>
      parseConfig({
        routing: { protocol: 'endpoint_picker', shed_status: 200 },
        workers: [{ id: 'a' }, { id: 'b', address: 'worker-b:8000' }, { id: 'c', address: '10.0.0.3:8000' }, { id: 'd', address: '10.0.0.3:8000' }],
      }),
    (err: Error) => {
      assert.match(err.message, /workers\.0\.address: required with routing\.protocol endpoint_picker/);
      assert.match(err.message, /workers\.1\.address: must be ip:port/);
      assert.match(err.message, /workers\.3\.address: duplicate address "10\.0\.0\.3:8000"/);
      assert.match(err.message, /routing\.shed_status/, 'other problems still listed');
      return true;
    },
  );
  assert.throws(() => parseConfig({ routing: { protocol: 'nginx' }, workers: [{ id: 'a', cluster: 'a' }] }), /routing\.protocol/);
});

test('addresses are stored in one spelling, and a proxy spelling them otherwise still finds the worker', () => {
  const cfg = parseConfig({
    routing: { protocol: 'endpoint_picker' },
    workers: [{ id: 'a', address: '[2001:DB8:0:0:0:0:0:1]:08000' }, { id: 'b', address: '10.0.0.2:0080' }],
  });
  assert.deepEqual(cfg.workers.map((w) => w.address), ['[2001:db8::1]:8000', '10.0.0.2:80']);
  // Two spellings of one address are one worker: refused as a duplicate.
  assert.throws(
    () => parseConfig({ routing: { protocol: 'endpoint_picker' }, workers: [{ id: 'a', address: '[fd00::1]:80' }, { id: 'b', address: '[FD00:0::1]:80' }] }),
    /duplicate address/,
  );
  assert.equal(workerAt(cfg.workers, '[2001:db8::1]:8000')?.id, 'a');
  assert.equal(workerAt(cfg.workers, '[2001:0db8::0:1]:8000')?.id, 'a');
  assert.equal(workerAt(cfg.workers, '10.0.0.2:80')?.id, 'b');
  assert.equal(workerAt(cfg.workers, '10.0.0.3:80'), undefined);
  assert.deepEqual([...workersAt(cfg.workers, ['[2001:DB8::1]:8000', 'junk', '10.0.0.2:080'])].sort(), ['a', 'b']);
  // An entry without a port allows that IP on any port (GIE's reference picker, llm-d).
  assert.deepEqual([...workersAt(cfg.workers, ['10.0.0.2'])], ['b']);
  assert.deepEqual([...workersAt(cfg.workers, ['2001:db8::1'])], ['a']);
  assert.deepEqual([...workersAt(cfg.workers, ['[2001:0DB8::1]'])], ['a']);
  assert.deepEqual([...workersAt(cfg.workers, ['10.0.0.20', '10.0.0.2:81'])], []);
});

test('subset hint: list entries that are themselves comma-separated lists are read entry by entry', () => {
  const md = (values: string[]) => ({
    filter_metadata: { 'envoy.lb.subset_hint': { fields: { 'x-gateway-destination-endpoint-subset': { listValue: { values: values.map((stringValue) => ({ stringValue })) } } } } },
  });
  assert.deepEqual(subsetHint(md(['10.0.0.1:80, 10.0.0.2:80', '10.0.0.3:80'])), ['10.0.0.1:80', '10.0.0.2:80', '10.0.0.3:80']);
});

test('ip:port means an IP literal and a port in range', () => {
  for (const good of ['10.0.0.1:80', '127.0.0.1:65535', '[::1]:8000', '[fd00::1:2]:1']) assert.ok(isEndpointAddress(good), good);
  for (const bad of ['10.0.0.1', '10.0.0.1:0', '10.0.0.1:65536', 'host:80', '::1:80', '[10.0.0.1]:80', '300.0.0.1:80', ' 10.0.0.1:80']) assert.ok(!isEndpointAddress(bad), bad);
});

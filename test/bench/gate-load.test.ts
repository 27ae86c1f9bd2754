/** The measuring scripts' shared pieces: a wrong flag is refused, Redis's counters read right. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { bodyModeFlag, commandCalls, commandStats, redisCpuUs, saturationPlan } from '../../scripts/lib/gate-load.js';
import { median } from '../../src/util/median.js';

describe('gate-measuring scripts: shared pieces', () => {
  test('body modes: the two Envoy modes pass, anything else names the flag', () => {
    assert.equal(bodyModeFlag('full_duplex'), 'full_duplex');
    assert.equal(bodyModeFlag('buffered'), 'buffered');
    assert.throws(() => bodyModeFlag('streamed', '--base-body-mode'), /--base-body-mode streamed: buffered or full_duplex/);
    assert.throws(() => bodyModeFlag(undefined), /--body-mode/);
  });

  test('the plan carries the routing header only when the server names one', () => {
    assert.deepEqual(saturationPlan({ target: 't', routingHeader: 'x-gateway-destination-endpoint' }, 2048, 'buffered'), {
      target: 't', bodyBytes: 2048, seed: 1, expectHeader: 'x-gateway-destination-endpoint', mode: 'closed', concurrency: 64, bodyMode: 'buffered',
    });
    assert.equal('expectHeader' in saturationPlan({ target: 't' }, 2048, 'buffered', 8), false);
  });

  test("Redis's INFO text: CPU as user + system µs, commands with calls and µs", () => {
    const cpu = '# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\nused_cpu_sys_children:9.000000\r\n';
    assert.equal(redisCpuUs(cpu), 3_750_000);
    const stats = '# Commandstats\r\ncmdstat_hmget:calls=17,usec=40,usec_per_call=2.35\r\ncmdstat_evalsha:calls=3,usec=900,usec_per_call=300.00\r\n';
    assert.deepEqual([...commandStats(stats)], [['hmget', { calls: 17, usec: 40 }], ['evalsha', { calls: 3, usec: 900 }]]);
  });
  test('median: the middle value, or the mean of the middle two; the input is left as it was', () => {
    const xs = [5, 1, 4];
    assert.equal(median(xs), 4);
    assert.deepEqual(xs, [5, 1, 4]);
    assert.equal(median([10, 2, 8, 4]), 6);
    assert.equal(median([7]), 7);
    assert.ok(Number.isNaN(median([])), "Number.isNaN(median([]))");
  });

  test('commandCalls: the calls of each command in INFO commandstats', () => {
    const info = 'cmdstat_evalsha:calls=12,usec=340,usec_per_call=28.33\r\ncmdstat_hget:calls=3,usec=1,usec_per_call=0.33\r\n';
    assert.deepEqual(commandCalls(info), new Map([['evalsha', 12], ['hget', 3]]));
  });
});

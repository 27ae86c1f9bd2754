/**
 * `serviceClass` is written without per-call closures (it runs on every request). This holds it
 * to the closure-based rule it replaced, kept here as the oracle, on any knob, class header and
 * objective header: the same class, source and ignored value, with the same fields.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { Config } from '../../src/config/schema.js';
import { serviceClass, type ClassSource, type ServiceClass } from '../../src/request/service-class.js';

const MAX_VALUE = 253;

function reference(headers: ReadonlyMap<string, string>, classes: Config['classes'], knob: string | undefined, endpointPicker: boolean, objectiveHeader: string): ServiceClass {
  const share = (name: string) => classes.levels.find((l) => l.name === name)?.share;
  let ignored: ServiceClass['ignored'];
  const found = (name: string | undefined, source: Exclude<ClassSource, 'default'>): ServiceClass | undefined => {
    if (name === undefined) return undefined;
    const s = share(name);
    if (s !== undefined) return { name, share: s, source, ...(ignored ? { ignored } : {}) };
    ignored ??= { source, value: name.length > 64 ? `${name.slice(0, 64)}…` : name };
    return undefined;
  };
  const value = (raw: string | undefined) => {
    if (raw === undefined) return undefined;
    const v = raw.trim().toLowerCase();
    return v === '' ? undefined : v.slice(0, MAX_VALUE + 1);
  };
  const byKnob = found(knob, 'knob');
  if (byKnob) return byKnob;
  const byHeader = found(value(headers.get(classes.header)), 'header');
  if (byHeader) return byHeader;
  if (endpointPicker) {
    const objective = headers.get(objectiveHeader)?.trim();
    if (objective !== undefined && objective !== '' && objective.length <= MAX_VALUE) {
      const mapped = (Object.hasOwn(classes.objectives, objective) ? classes.objectives[objective] : undefined) ?? (share(objective.toLowerCase()) !== undefined ? objective.toLowerCase() : undefined);
      if (mapped !== undefined) {
        const byObjective = found(mapped, 'objective');
        if (byObjective) return byObjective;
      }
    }
  }
  return { name: classes.default, share: share(classes.default) ?? 1, source: 'default', ...(ignored ? { ignored } : {}) };
}

describe('serviceClass against the closure-based reference', () => {
  test('any knob, class header and objective: the same answer, field for field', async () => {
    const { default: fc } = await import('fast-check');
    const name = fc.constantFrom('critical', 'standard', 'sheddable', 'Critical', ' standard ', 'nope', '', 'constructor', '__proto__', 'x'.repeat(70), 'y'.repeat(300));
    const classes: Config['classes'] = {
      header: 'x-kvgate-request-class',
      default: 'standard',
      levels: [
        { name: 'critical', share: 1 },
        { name: 'standard', share: 0.75 },
        { name: 'sheddable', share: 0.5 },
      ],
      // One objective maps to a class, one to a name that is no class (as no valid config has, to reach the branch).
      objectives: { 'chat-premium': 'critical', 'batch-jobs': 'nope' },
    } as Config['classes'];
    const objective = fc.oneof(name, fc.constantFrom('chat-premium', 'batch-jobs', ' chat-premium ', 'CRITICAL', 'z'.repeat(260)));
    fc.assert(
      fc.property(fc.option(name, { nil: undefined }), fc.option(name, { nil: undefined }), fc.option(objective, { nil: undefined }), fc.boolean(), (knob, header, obj, picker) => {
        const headers = new Map<string, string>();
        if (header !== undefined) headers.set('x-kvgate-request-class', header);
        if (obj !== undefined) headers.set('x-gateway-inference-objective', obj);
        const got = serviceClass(headers, classes, knob, picker, 'x-gateway-inference-objective');
        const want = reference(headers, classes, knob, picker, 'x-gateway-inference-objective');
        assert.deepEqual(got, want);
        assert.deepEqual(Object.keys(got), Object.keys(want));
      }),
      { numRuns: 2000 },
    );
  });
});

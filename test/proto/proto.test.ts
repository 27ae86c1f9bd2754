// kvgate's protos (proto/): buf lint and build pass, breaking changes against the committed
// baseline are caught, the generated TypeScript types are up to date, and every Envoy message
// kvgate defines is wire-compatible with the npm copy of Envoy's API (@grpc/grpc-js-xds): same
// numbers and types, and bytes written by one decode to the same values with the other, both ways.

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import protobuf from 'protobufjs';
import type { Enum, Field, MapField, Namespace, ReflectionObject, Root, Type } from 'protobufjs';
import { REPO_ROOT, runBuf } from '../../scripts/envoy-schema.js';
import { staleGeneratedFiles } from '../../scripts/gen-proto.js';
import { EXT_PROC_PROTO, PROTO_ROOT, extProcServiceDefinition } from '../../src/extproc/proto.js';

const require = createRequire(import.meta.url);
const BASELINE = path.join(PROTO_ROOT, 'baseline.binpb');

describe('proto/ with buf', { concurrency: true }, () => {
  test('buf lint passes on proto/', async () => {
    const r = await runBuf(['lint'], REPO_ROOT);
    assert.equal(r.code, 0, r.stdout + r.stderr);
  });

  test('buf lint holds kvgate/ to the STANDARD rules (a badly named field fails)', async () => {
    const tmp = await mkdtemp(path.join(os.tmpdir(), 'kvgate-proto-lint-'));
    try {
      await cp(PROTO_ROOT, path.join(tmp, 'proto'), { recursive: true });
      await cp(path.join(REPO_ROOT, 'buf.yaml'), path.join(tmp, 'buf.yaml'));
      const file = path.join(tmp, 'proto', 'kvgate', 'v1', 'offload.proto');
      await writeFile(file, (await readFile(file, 'utf8')).replace('string reason = 4;', 'string Reason = 4;'));
      const r = await runBuf(['lint'], tmp);
      assert.notEqual(r.code, 0, 'lint accepted a camel-case field name');
      assert.match(r.stdout + r.stderr, /FIELD_LOWER_SNAKE_CASE|lower_snake_case/);
    } finally {
      await rm(tmp, { recursive: true, force: true });
    }
  });

  test('buf build succeeds and has no breaking change against proto/baseline.binpb', async () => {
    const built = await runBuf(['build', '-o', '/dev/null'], REPO_ROOT);
    assert.equal(built.code, 0, built.stderr);
    const r = await runBuf(['breaking', '--against', BASELINE], REPO_ROOT);
    assert.equal(r.code, 0, r.stdout + r.stderr);
  });

  test('buf breaking catches a renumbered Envoy field', async () => {
    const tmp = await mkdtemp(path.join(os.tmpdir(), 'kvgate-proto-breaking-'));
    try {
      await cp(PROTO_ROOT, path.join(tmp, 'proto'), { recursive: true });
      await cp(path.join(REPO_ROOT, 'buf.yaml'), path.join(tmp, 'buf.yaml'));
      const file = path.join(tmp, 'proto', 'envoy', 'service', 'ext_proc', 'v3', 'external_processor.proto');
      const src = await readFile(file, 'utf8');
      assert.ok(src.includes('ProtocolConfiguration protocol_config = 11;'));
      await writeFile(file, src.replace('ProtocolConfiguration protocol_config = 11;', 'ProtocolConfiguration protocol_config = 13;'));
      const r = await runBuf(['breaking', '--against', BASELINE], tmp);
      assert.notEqual(r.code, 0, 'breaking change not detected');
      assert.match(r.stdout + r.stderr, /protocol_config|11/);
    } finally {
      await rm(tmp, { recursive: true, force: true });
    }
  });

  test('the generated TypeScript types in src/generated/proto are up to date (npm run gen:proto)', async () => {
    assert.deepEqual(await staleGeneratedFiles(), []);
  });

  test('the server loads ExternalProcessor/Process from proto/', () => {
    const svc = extProcServiceDefinition();
    assert.equal(svc.Process?.path, '/envoy.service.ext_proc.v3.ExternalProcessor/Process');
    assert.ok(svc.Process?.requestStream && svc.Process?.responseStream, "svc.Process?.requestStream && svc.Process?.responseStream");
  });
});

// ---------------------------------------------------------------------------------------------
// wire compatibility with the npm copy of Envoy's API

function loadRoot(entry: string, includeDirs: string[]): Root {
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => {
    if (path.isAbsolute(target)) return target;
    for (const dir of includeDirs) {
      const candidate = path.join(dir, target);
      try {
        require.resolve(candidate);
        return candidate;
      } catch {
        // next include dir
      }
    }
    // google/protobuf/*: protobufjs's built-in copies, or the ones it ships as files (descriptor.proto).
    if (target.startsWith('google/protobuf/') && target in protobuf.common) return target;
    return path.join(path.dirname(require.resolve('protobufjs/package.json')), target);
  };
  root.loadSync(entry, { keepCase: true });
  root.resolveAll();
  return root;
}

function npmRoot(): Root {
  const deps = path.join(path.dirname(require.resolve('@grpc/grpc-js-xds/package.json')), 'deps');
  const dirs = ['envoy-api', 'xds', 'protoc-gen-validate', 'googleapis'].map((d) => path.join(deps, d));
  return loadRoot(EXT_PROC_PROTO, dirs);
}

function ourRoot(): Root {
  return loadRoot(EXT_PROC_PROTO, [PROTO_ROOT]);
}

function walk(ns: Namespace, out: { types: Type[]; enums: Enum[] }): void {
  for (const o of ns.nestedArray as ReflectionObject[]) {
    if (o instanceof protobuf.Type) {
      out.types.push(o);
      walk(o, out);
    } else if (o instanceof protobuf.Enum) {
      out.enums.push(o);
    } else if (o instanceof protobuf.Namespace) {
      walk(o, out);
    }
  }
}

const fullName = (o: ReflectionObject): string => o.fullName.replace(/^\./, '');
/** Envoy messages only: the WKTs are protobufjs's own copy on both sides. */
const isEnvoy = (o: ReflectionObject): boolean => fullName(o).startsWith('envoy.');

const SAMPLE_STRUCT = { fields: { ns: { structValue: { fields: { k: { stringValue: 'v' }, n: { numberValue: 3 }, l: { listValue: { values: [{ boolValue: true }] } } } } } } };

/**
 * A message with every field that both sides define set to a non-default value; `pick` chooses
 * which member of each oneof is set. Nested messages are filled the same way (to a small depth).
 */
function sample(type: Type, other: Type, pick: number, depth = 0): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const chosen = new Set(type.oneofsArray.map((o) => {
    const both = sharedMembers(o, other);
    return both[pick % both.length]?.name;
  }));
  for (const f of type.fieldsArray) {
    const g = other.fields[f.name];
    if (!g || g.id !== f.id) continue;
    if (f.partOf && !chosen.has(f.name)) continue;
    const v = sampleValue(f, g, pick, depth);
    if (v === undefined) continue;
    out[f.name] = f.repeated && !(f instanceof protobuf.MapField) ? [v, v] : v;
  }
  return out;
}

/** The members of a oneof that both sides define with the same number. */
function sharedMembers(o: protobuf.OneOf, other: Type): Field[] {
  return o.fieldsArray.filter((f) => other.fields[f.name]?.id === f.id);
}

function sampleValue(f: Field, g: Field, pick: number, depth: number): unknown {
  const rt = f.resolvedType;
  if (f instanceof protobuf.MapField) {
    const inner = scalarOrMessage(f, g, rt, pick, depth);
    return inner === undefined ? undefined : { a: inner, b: inner };
  }
  return scalarOrMessage(f, g, rt, pick, depth);
}

function scalarOrMessage(f: Field | MapField, g: Field, rt: Type | Enum | null, pick: number, depth: number): unknown {
  if (rt instanceof protobuf.Enum) {
    // The highest value both sides know (proves the numbers agree for a non-zero value).
    const common = Object.entries(rt.values).filter(([name, n]) => (g.resolvedType as Enum | null)?.values[name] === n);
    return common.length > 0 ? common[common.length - 1]![0] : undefined;
  }
  if (rt instanceof protobuf.Type) {
    if (fullName(rt) === 'google.protobuf.Struct') return SAMPLE_STRUCT;
    if (fullName(rt) === 'google.protobuf.BoolValue') return { value: true };
    if (fullName(rt) === 'google.protobuf.Duration') return { seconds: '7', nanos: 5000 };
    if (depth > 3) return undefined;
    return sample(rt, g.resolvedType as Type, pick, depth + 1);
  }
  switch (f.type) {
    case 'string': return `s-${f.name}-\u00e9`;
    case 'bytes': return Buffer.from([0, 255, 10, f.id]).toString('base64');
    case 'bool': return true;
    case 'uint32': case 'int32': return 1000 + f.id;
    case 'uint64': case 'int64': return String(9_000_000_000 + f.id);
    case 'double': case 'float': return 1.5;
    default: throw new Error(`no sample for ${f.type} (${f.name})`);
  }
}

const TO_OBJECT = { enums: String, longs: String, bytes: String, defaults: false, oneofs: false } as const;

function roundTrip(from: Type, to: Type, obj: Record<string, unknown>): { sent: unknown; got: unknown } {
  const bytes = from.encode(from.fromObject(obj)).finish();
  const sent = from.toObject(from.fromObject(obj), TO_OBJECT);
  const got = to.toObject(to.decode(bytes), TO_OBJECT);
  return { sent, got };
}

describe('wire compatibility with the npm copy of the Envoy API', () => {
  const ours = ourRoot();
  const npm = npmRoot();
  const mine = { types: [] as Type[], enums: [] as Enum[] };
  walk(ours, mine);
  const shared = mine.types.filter(isEnvoy).flatMap((t) => {
    const other = npm.lookup(fullName(t));
    return other instanceof protobuf.Type ? [[t, other] as const] : [];
  });

  test('every Envoy message kvgate defines exists in Envoy\'s API, except the ones newer than the npm copy', () => {
    const missing = mine.types.filter(isEnvoy).map(fullName).filter((n) => !(npm.lookup(n) instanceof protobuf.Type));
    assert.deepEqual(missing.sort(), ['envoy.service.ext_proc.v3.ProtocolConfiguration', 'envoy.service.ext_proc.v3.StreamedBodyResponse']);
    assert.equal(shared.length, 19, 'every other message kvgate defines is in the npm copy');
  });

  test('fields: same number, type, label and oneof as Envoy\'s (fields newer than the npm copy listed)', () => {
    const newer: string[] = [];
    let checked = 0;
    for (const [t, o] of shared) {
      for (const f of t.fieldsArray) {
        const g = o.fields[f.name];
        if (!g) {
          newer.push(`${fullName(t)}.${f.name}`);
          assert.equal(o.fieldsById[f.id], undefined, `${fullName(t)}.${f.name}: number ${f.id} is used by ${o.fieldsById[f.id]?.name} upstream`);
          continue;
        }
        const where = `${fullName(t)}.${f.name}`;
        assert.equal(g.id, f.id, `${where}: number`);
        // Message and enum references are compared resolved (the spelling of the reference may differ).
        if (!f.resolvedType) assert.equal(g.type, f.type, `${where}: type`);
        assert.equal(g.repeated, f.repeated, `${where}: repeated`);
        assert.equal(g instanceof protobuf.MapField, f instanceof protobuf.MapField, `${where}: map`);
        if (f instanceof protobuf.MapField) assert.equal((g as unknown as MapField).keyType, f.keyType, `${where}: map key`);
        assert.equal(g.partOf?.name, f.partOf?.name, `${where}: oneof`);
        assert.equal(g.resolvedType?.fullName, f.resolvedType?.fullName, `${where}: message/enum type`);
        checked++;
      }
    }
    assert.deepEqual(newer.sort(), [
      'envoy.service.ext_proc.v3.BodyMutation.streamed_response',
      'envoy.service.ext_proc.v3.ProcessingRequest.protocol_config',
    ]);
    assert.ok(checked >= 50, `only ${checked} fields compared`);
  });

  test('enums: every value kvgate names has Envoy\'s number', () => {
    const newer: string[] = [];
    for (const e of mine.enums.filter(isEnvoy)) {
      const other = npm.lookup(fullName(e));
      assert.ok(other instanceof protobuf.Enum, `${fullName(e)} missing upstream`);
      for (const [name, n] of Object.entries(e.values)) {
        if (other.values[name] === undefined) newer.push(`${fullName(e)}.${name}`);
        else assert.equal(other.values[name], n, `${fullName(e)}.${name}`);
      }
    }
    assert.deepEqual(newer.sort(), [
      'envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode.FULL_DUPLEX_STREAMED',
      'envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode.GRPC',
    ]);
  });

  test('populated messages encoded by either side decode to the same values on the other', () => {
    let checked = 0;
    for (const [t, o] of shared) {
      const picks = Math.max(1, ...t.oneofsArray.map((x) => sharedMembers(x, o).length));
      for (let pick = 0; pick < picks; pick++) {
        const obj = sample(t, o, pick);
        assert.ok(Object.keys(obj).length > 0, `${fullName(t)}: empty sample`);
        const a = roundTrip(t, o, obj);
        assert.deepEqual(a.got, a.sent, `${fullName(t)} (oneof pick ${pick}): kvgate → npm`);
        const b = roundTrip(o, t, obj);
        assert.deepEqual(b.got, b.sent, `${fullName(t)} (oneof pick ${pick}): npm → kvgate`);
        checked++;
      }
    }
    assert.ok(checked >= shared.length, "checked >= shared.length");
  });

  test('what only kvgate declares (protocol_config, streamed_response) is skipped by the older copy, and the rest survives', () => {
    const req = ours.lookupType('envoy.service.ext_proc.v3.ProcessingRequest');
    const oldReq = npm.lookupType('envoy.service.ext_proc.v3.ProcessingRequest');
    const bytes = req.encode(req.fromObject({
      request_body: { body: Buffer.from('abc').toString('base64'), end_of_stream: true },
      protocol_config: { request_body_mode: 'FULL_DUPLEX_STREAMED', response_body_mode: 'FULL_DUPLEX_STREAMED' },
    })).finish();
    const back = oldReq.toObject(oldReq.decode(bytes), TO_OBJECT) as { request_body?: { body?: string } };
    assert.equal(Buffer.from(back.request_body?.body ?? '', 'base64').toString(), 'abc');
    const mine2 = req.toObject(req.decode(bytes), TO_OBJECT) as { protocol_config?: { request_body_mode?: string } };
    assert.equal(mine2.protocol_config?.request_body_mode, 'FULL_DUPLEX_STREAMED');
  });
});

describe('kvgate contracts in proto/kvgate match what kvgate does', () => {
  const root = loadRoot('kvgate/v1/offload.proto', [PROTO_ROOT]);
  loadRoot('kvgate/v1/decision_metadata.proto', [PROTO_ROOT]);

  test('OffloadEvent: the Redis Stream entry fields are the message fields, in order', async () => {
    const names = root.lookupType('kvgate.v1.OffloadEvent').fieldsArray.map((f) => f.name);
    assert.deepEqual(names, ['session', 'from', 'to', 'reason', 'time']);
    const script = await readFile(path.join(REPO_ROOT, 'src', 'state', 'redis-scripts.ts'), 'utf8');
    const xadd = /'XADD'[^\n]*'\*', ([^\n]*)\)/.exec(script)?.[1] ?? '';
    const fields = [...xadd.matchAll(/'(\w+)', /g)].map((m) => m[1]);
    assert.deepEqual(fields, names, `XADD writes ${xadd}`);
  });

  test('DecisionMetadata: its JSON names are the namespace and key kvgate writes', async () => {
    const { destinationMetadata, DESTINATION_HEADER, LB_NAMESPACE } = await import('../../src/extproc/endpoint-picker.js');
    const dm = loadRoot('kvgate/v1/decision_metadata.proto', [PROTO_ROOT]);
    const ns = dm.lookupType('kvgate.v1.DecisionMetadata').fieldsArray[0]!;
    const key = dm.lookupType('kvgate.v1.LbMetadata').fieldsArray[0]!;
    const json = (f: Field): string | undefined => (f.options as Record<string, string> | undefined)?.json_name;
    assert.equal(json(ns), LB_NAMESPACE);
    assert.equal(json(key), DESTINATION_HEADER);
    const written = destinationMetadata('10.0.0.7:8000');
    assert.deepEqual(Object.keys(written.fields), [json(ns)]);
    assert.deepEqual(Object.keys(written.fields[LB_NAMESPACE]?.structValue?.fields ?? {}), [json(key)]);
  });
});

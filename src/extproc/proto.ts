/**
 * Loads Envoy's ext_proc service definition at run time.
 *
 * Envoy's protos reach us only through npm: `@grpc/grpc-js-xds` ships a copy of the Envoy API
 * (about Envoy 1.31, mid-2024) under `deps/`. We load `external_processor.proto` from there with
 * proto-loader rather than vendoring or generating code, so nothing upstream is pasted into this
 * repository and a grpc-js-xds upgrade brings newer protos with it. Limits of that copy (see
 * docs/DESIGN.md): no FULL_DUPLEX_STREAMED / StreamedBodyResponse, no `protocol_config`. Fields
 * a newer Envoy sends that this copy lacks are skipped by protobufjs when decoding.
 *
 * This is the only module that knows where Envoy's protos live; everything else imports the
 * loaded definitions from here.
 */
import { createRequire } from 'node:module';
import path from 'node:path';
import * as protoLoader from '@grpc/proto-loader';
import * as grpc from '@grpc/grpc-js';

const require = createRequire(import.meta.url);

/** Root of the Envoy proto tree shipped inside @grpc/grpc-js-xds. */
export const ENVOY_PROTO_DEPS = path.join(
  path.dirname(require.resolve('@grpc/grpc-js-xds/package.json')),
  'deps',
);

/** The include dirs proto-loader needs; all three are required by ext_proc's imports. */
export const ENVOY_INCLUDE_DIRS = ['envoy-api', 'xds', 'protoc-gen-validate', 'googleapis'].map((d) =>
  path.join(ENVOY_PROTO_DEPS, d),
);

/**
 * keepCase: field names as in the .proto (snake_case), matching Envoy's docs and YAML.
 * longs/enums as String: enum values compare as names ('CONTINUE'), never numbers.
 * defaults + oneofs: every message has every field, and the oneof case is named in a
 * virtual property (`request`, `response`), which the stream state machine switches on.
 */
export const PROTO_LOADER_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
  includeDirs: ENVOY_INCLUDE_DIRS,
};

export const EXT_PROC_SERVICE_NAME = 'envoy.service.ext_proc.v3.ExternalProcessor';
export const EXT_PROC_PROTO = 'envoy/service/ext_proc/v3/external_processor.proto';

let cached: grpc.ServiceDefinition | undefined;

/** The `ExternalProcessor` service definition (loaded once, then cached). */
export function extProcServiceDefinition(): grpc.ServiceDefinition {
  if (!cached) {
    const pkgDef = protoLoader.loadSync(EXT_PROC_PROTO, PROTO_LOADER_OPTIONS);
    const svc = pkgDef[EXT_PROC_SERVICE_NAME] as grpc.ServiceDefinition | undefined;
    if (!svc) throw new Error(`${EXT_PROC_SERVICE_NAME} not found in ${EXT_PROC_PROTO}`);
    cached = svc;
  }
  return cached;
}

/** A client constructor for the same service (used by the test harness and `kvgate bench`). */
export function extProcClientConstructor(): grpc.ServiceClientConstructor {
  return grpc.makeClientConstructor(extProcServiceDefinition(), 'ExternalProcessor');
}

/**
 * Loads the ext_proc service at run time from kvgate's own protos under proto/ (Envoy's
 * `envoy.service.ext_proc.v3.ExternalProcessor`, written for kvgate wire-compatible with Envoy's
 * API; see docs/DESIGN.md §2). proto-loader reads the .proto files when the server starts, so
 * there is no generated runtime code to keep in step; the TypeScript types in src/generated/proto
 * come from the same files with the same options (scripts/gen-proto.ts), and a test fails when
 * they are stale.
 *
 * This is the only module that knows where the protos live; everything else imports the loaded
 * definitions from here.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as protoLoader from '@grpc/proto-loader';
import * as grpc from '@grpc/grpc-js';

/** proto/ at the repository (or image) root. */
export const PROTO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'proto');

/**
 * keepCase: field names as in the .proto (snake_case), matching Envoy's docs and YAML.
 * longs/enums as String: enum values compare as names ('CONTINUE'), never numbers.
 * defaults + oneofs: every message has every field, and the oneof case is named in a
 * virtual property (`request`, `response`), which the stream state machine switches on.
 * scripts/gen-proto.ts passes the same options to the type generator.
 */
export const PROTO_LOADER_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
  includeDirs: [PROTO_ROOT],
};

export const EXT_PROC_SERVICE_NAME = 'envoy.service.ext_proc.v3.ExternalProcessor';
export const EXT_PROC_PROTO = 'envoy/service/ext_proc/v3/external_processor.proto';

let cachedPackage: protoLoader.PackageDefinition | undefined;

/** The loaded ext_proc package definition (every message of the file and its imports). */
export function extProcPackageDefinition(): protoLoader.PackageDefinition {
  cachedPackage ??= protoLoader.loadSync(EXT_PROC_PROTO, PROTO_LOADER_OPTIONS);
  return cachedPackage;
}

/** The `ExternalProcessor` service definition (loaded once, then cached). */
export function extProcServiceDefinition(): grpc.ServiceDefinition {
  const svc = extProcPackageDefinition()[EXT_PROC_SERVICE_NAME] as grpc.ServiceDefinition | undefined;
  if (!svc) throw new Error(`${EXT_PROC_SERVICE_NAME} not found in ${EXT_PROC_PROTO}`);
  return svc;
}

/** A client constructor for the same service (used by the test harness and `kvgate bench`). */
export function extProcClientConstructor(): grpc.ServiceClientConstructor {
  return grpc.makeClientConstructor(extProcServiceDefinition(), 'ExternalProcessor');
}

/** How a service's replies are turned into bytes (grpc-js's `responseSerialize`). */
export type ResponseSerializer = (msg: unknown) => Buffer;

/** The service with every method's response serializer replaced by `wrap` of it. */
export function withResponseSerializer(def: grpc.ServiceDefinition, wrap: (serialize: ResponseSerializer) => ResponseSerializer): grpc.ServiceDefinition {
  const out: Record<string, grpc.ServiceDefinition[string]> = {};
  for (const [name, method] of Object.entries(def)) out[name] = { ...method, responseSerialize: wrap(method.responseSerialize as ResponseSerializer) };
  return out;
}

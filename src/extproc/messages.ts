/**
 * The ext_proc messages as TypeScript types, generated from proto/ (npm run gen:proto) for the
 * loader options of ./proto.ts (snake_case fields, enums as their names, bytes as Buffers, the set
 * oneof case named in a virtual property). This module only gives them the names kvgate uses:
 *
 *  - the plain names (ProcessingRequest, ProcessingResponse, CommonResponse, ...) are the shapes a
 *    sender writes (every field optional, bytes as Buffer, Uint8Array or string);
 *  - `Received*` and the read-side helpers (HeaderMap, PbStruct, MetadataContext) are what the
 *    receiving side gets after decoding (defaults filled in, bytes always a Buffer).
 *
 * Nothing here is written by hand: change proto/ and regenerate.
 */
import type { HeaderMap__Output } from '../generated/proto/envoy/config/core/v3/HeaderMap.js';
import type { HeaderValue__Output } from '../generated/proto/envoy/config/core/v3/HeaderValue.js';
import type { Metadata__Output } from '../generated/proto/envoy/config/core/v3/Metadata.js';
import type { _envoy_extensions_filters_http_ext_proc_v3_ProcessingMode_BodySendMode__Output as BodySendMode__Output } from '../generated/proto/envoy/extensions/filters/http/ext_proc/v3/ProcessingMode.js';
import type { Struct__Output } from '../generated/proto/google/protobuf/Struct.js';
import type { Value__Output } from '../generated/proto/google/protobuf/Value.js';
import type { ProcessingRequest as GenProcessingRequest, ProcessingRequest__Output } from '../generated/proto/envoy/service/ext_proc/v3/ProcessingRequest.js';
import type { ProcessingResponse as GenProcessingResponse, ProcessingResponse__Output } from '../generated/proto/envoy/service/ext_proc/v3/ProcessingResponse.js';

export type { CommonResponse, CommonResponse__Output as ReceivedCommonResponse } from '../generated/proto/envoy/service/ext_proc/v3/CommonResponse.js';
export type { HeaderMutation, HeaderMutation__Output as ReceivedHeaderMutation } from '../generated/proto/envoy/service/ext_proc/v3/HeaderMutation.js';
export type { ImmediateResponse, ImmediateResponse__Output as ReceivedImmediateResponse } from '../generated/proto/envoy/service/ext_proc/v3/ImmediateResponse.js';
export type { BodyMutation, BodyMutation__Output as ReceivedBodyMutation } from '../generated/proto/envoy/service/ext_proc/v3/BodyMutation.js';
export type { StreamedBodyResponse } from '../generated/proto/envoy/service/ext_proc/v3/StreamedBodyResponse.js';
export type { ProtocolConfiguration__Output as ProtocolConfiguration } from '../generated/proto/envoy/service/ext_proc/v3/ProtocolConfiguration.js';
export type { StatusCode as HttpStatusCode } from '../generated/proto/envoy/type/v3/StatusCode.js';
export type { HeaderValueOption } from '../generated/proto/envoy/config/core/v3/HeaderValueOption.js';
export type { HeaderMap as HeaderMapInput } from '../generated/proto/envoy/config/core/v3/HeaderMap.js';
export type { Metadata as MetadataContextInput } from '../generated/proto/envoy/config/core/v3/Metadata.js';
export type { Struct as PbStructInput } from '../generated/proto/google/protobuf/Struct.js';
export type { ProcessingMode as ProcessingModeInput } from '../generated/proto/envoy/extensions/filters/http/ext_proc/v3/ProcessingMode.js';

/** A ProcessingRequest as a sender (Envoy, the harness, the bench client) writes it. */
export type ProcessingRequest = GenProcessingRequest;
/** A ProcessingRequest as kvgate receives it. */
export type ReceivedProcessingRequest = ProcessingRequest__Output;
/** A ProcessingResponse as kvgate writes it. */
export type ProcessingResponse = GenProcessingResponse;
/** A ProcessingResponse as Envoy's side (the harness, the bench client) receives it. */
export type ReceivedProcessingResponse = ProcessingResponse__Output;

export type HeaderValue = HeaderValue__Output;
export type HeaderMap = HeaderMap__Output;
/** google.protobuf.Struct / Value as decoded: `kind` names the member that is set. */
export type PbStruct = Struct__Output;
export type PbValue = Value__Output;
export type MetadataContext = Metadata__Output;
/** A body mode by name ('NONE', 'STREAMED', 'BUFFERED', 'BUFFERED_PARTIAL', 'FULL_DUPLEX_STREAMED', 'GRPC'). */
export type BodySendMode = BodySendMode__Output;

export type ProcessingRequestKind = NonNullable<ProcessingRequest__Output['request']>;

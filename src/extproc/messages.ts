/**
 * TypeScript shapes of the ext_proc messages as proto-loader decodes them with the options in
 * ./proto.ts (snake_case fields, enums as strings, oneof case in a virtual property).
 * Only the fields kvgate reads or writes are declared; decoding keeps the rest.
 * Protocol reference: envoy/service/ext_proc/v3/external_processor.proto.
 */

export interface HeaderValue {
  key: string;
  value?: string;
  /** Envoy sends and reads header values here (bytes); `value` is ignored by Envoy. */
  raw_value?: Buffer | Uint8Array;
}

export interface HeaderMap {
  headers: HeaderValue[];
}

export interface HttpHeaders {
  headers: HeaderMap | null;
  end_of_stream: boolean;
}

export interface HttpBody {
  body: Buffer;
  end_of_stream: boolean;
}

export interface HttpTrailers {
  trailers: HeaderMap | null;
}

/**
 * google.protobuf.Struct as proto-loader decodes it. protobufjs brings its own copy of the
 * well-known types, so these fields are camelCase even with `keepCase`, and `kind` names the one
 * that is set.
 */
export interface PbStruct {
  fields: Record<string, PbValue>;
}
export interface PbValue {
  kind?: 'nullValue' | 'numberValue' | 'stringValue' | 'boolValue' | 'structValue' | 'listValue';
  nullValue?: string | number;
  numberValue?: number;
  stringValue?: string;
  boolValue?: boolean;
  structValue?: PbStruct;
  listValue?: { values: PbValue[] };
}

export interface MetadataContext {
  filter_metadata: Record<string, PbStruct>;
}

export type ProcessingRequestKind =
  | 'request_headers'
  | 'response_headers'
  | 'request_body'
  | 'response_body'
  | 'request_trailers'
  | 'response_trailers';

export interface ProcessingRequest {
  request?: ProcessingRequestKind;
  request_headers?: HttpHeaders | null;
  response_headers?: HttpHeaders | null;
  request_body?: HttpBody | null;
  response_body?: HttpBody | null;
  request_trailers?: HttpTrailers | null;
  response_trailers?: HttpTrailers | null;
  metadata_context?: MetadataContext | null;
  attributes?: Record<string, PbStruct>;
  observability_mode?: boolean;
}

export interface HeaderValueOption {
  header: HeaderValue;
  /** Envoy's ext_proc honours only this deprecated BoolValue; false (default) overwrites. */
  append?: { value: boolean };
}

export interface HeaderMutation {
  set_headers?: HeaderValueOption[];
  remove_headers?: string[];
}

export interface CommonResponse {
  status?: 'CONTINUE' | 'CONTINUE_AND_REPLACE';
  header_mutation?: HeaderMutation;
  body_mutation?: { body?: Buffer; clear_body?: boolean };
  clear_route_cache?: boolean;
}

export interface ImmediateResponse {
  status: { code: number | string };
  headers?: HeaderMutation;
  /** bytes: always a Buffer (a JS string would be read as base64). */
  body?: Buffer;
  details?: string;
}

export interface ProcessingResponse {
  request_headers?: { response?: CommonResponse };
  response_headers?: { response?: CommonResponse };
  request_body?: { response?: CommonResponse };
  response_body?: { response?: CommonResponse };
  request_trailers?: { header_mutation?: HeaderMutation };
  response_trailers?: { header_mutation?: HeaderMutation };
  immediate_response?: ImmediateResponse;
  dynamic_metadata?: PbStruct;
  /** Set by proto-loader on decode (oneofs: true): which reply this is. */
  response?: string;
}

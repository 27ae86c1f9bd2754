// Original file: proto/envoy/service/ext_proc/v3/external_processor.proto


export interface StreamedBodyResponse {
  'body'?: (Buffer | Uint8Array | string);
  'end_of_stream'?: (boolean);
}

export interface StreamedBodyResponse__Output {
  'body': (Buffer);
  'end_of_stream': (boolean);
}

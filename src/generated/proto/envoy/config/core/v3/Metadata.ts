// Original file: proto/envoy/config/core/v3/base.proto

import type { Struct as _google_protobuf_Struct, Struct__Output as _google_protobuf_Struct__Output } from '../../../../google/protobuf/Struct.js';

export interface Metadata {
  'filter_metadata'?: ({[key: string]: _google_protobuf_Struct});
}

export interface Metadata__Output {
  'filter_metadata': ({[key: string]: _google_protobuf_Struct__Output});
}

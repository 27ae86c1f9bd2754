// Original file: proto/kvgate/v1/offload.proto

import type { Long } from '@grpc/proto-loader';

export interface OffloadEvent {
  'session'?: (string);
  'from'?: (string);
  'to'?: (string);
  'reason'?: (string);
  'time'?: (number | string | Long);
}

export interface OffloadEvent__Output {
  'session': (string);
  'from': (string);
  'to': (string);
  'reason': (string);
  'time': (string);
}

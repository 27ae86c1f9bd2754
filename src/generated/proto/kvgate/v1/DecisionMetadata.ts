// Original file: proto/kvgate/v1/decision_metadata.proto

import type { LbMetadata as _kvgate_v1_LbMetadata, LbMetadata__Output as _kvgate_v1_LbMetadata__Output } from '../../kvgate/v1/LbMetadata.js';

export interface DecisionMetadata {
  'envoy_lb'?: (_kvgate_v1_LbMetadata | null);
}

export interface DecisionMetadata__Output {
  'envoy_lb': (_kvgate_v1_LbMetadata__Output | null);
}

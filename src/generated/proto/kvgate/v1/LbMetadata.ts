// Original file: proto/kvgate/v1/decision_metadata.proto


export interface LbMetadata {
  'destination_endpoint'?: (string);
}

export interface LbMetadata__Output {
  'destination_endpoint': (string);
}

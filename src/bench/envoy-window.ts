/**
 * The HTTP/2 flow-control windows Envoy opens on its ext_proc connection, so that the Envoy
 * stand-ins (the bench's load client and the test harness) let kvgate send as much before a
 * WINDOW_UPDATE as Envoy does.
 *
 * Envoy's gRPC client (`envoy_grpc`) speaks HTTP/2 with the ext_proc cluster's
 * `http2_protocol_options`. The shipped configs leave them empty (envoy/envoy.yaml), so Envoy's
 * defaults hold: a stream window of 16 MiB and a connection window of 24 MiB (data-plane-api
 * `envoy/config/core/v3/protocol.proto`, `Http2ProtocolOptions.initial_stream_window_size` and
 * `initial_connection_window_size`; `Http2::Utility::initializeAndValidateOptions` in Envoy's
 * `source/common/http/utility.cc` fills them in; releases before that default used 256 MiB for
 * both, `OptionsLimits` in `source/common/http/utility.h`). grpc-js's own default is HTTP/2's 64 KiB,
 * which made a full-duplex echo of a 400 KB body wait on seven window updates that Envoy never
 * asks for. grpc-js sets the stream and the connection window from one option, so the stand-ins
 * open 16 MiB for both: the connection's is Envoy's stream window, not its larger connection one.
 */
import type { ChannelOptions } from '@grpc/grpc-js';

/** Envoy's default initial stream window (bytes). */
export const ENVOY_STREAM_WINDOW_BYTES = 16 * 1024 * 1024;

/** Channel options that open Envoy's windows on a grpc-js client. */
export function envoyWindowOptions(): ChannelOptions {
  return { 'grpc-node.flow_control_window': ENVOY_STREAM_WINDOW_BYTES };
}

/**
 * A trace receiver that speaks OTLP, as Jaeger's or an OpenTelemetry Collector's does, on free
 * ports: OTLP/HTTP (`POST /v1/traces`, JSON or protobuf) and OTLP/gRPC
 * (`opentelemetry.proto.collector.trace.v1.TraceService/Export`).
 *
 * JSON payloads are decoded into spans (OTLP/JSON: hex ids, typed attribute values). Protobuf
 * payloads are kept as bytes: the OTLP protos are not in node_modules, so tests check them for the
 * bytes they must contain (the 16-byte trace id, the span name) rather than decoding them.
 */
import * as grpc from '@grpc/grpc-js';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  attributes: Record<string, unknown>;
  events: Array<{ name: string; attributes: Record<string, unknown> }>;
  status: { code?: number; message?: string };
  resource: Record<string, unknown>;
  scope: string;
}

export interface RawExport {
  transport: 'http' | 'grpc';
  contentType: string;
  body: Buffer;
}

type OtlpValue = {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: string | number;
  doubleValue?: number;
  arrayValue?: { values?: OtlpValue[] };
};
type OtlpKv = { key: string; value: OtlpValue };

function value(v: OtlpValue | undefined): unknown {
  if (!v) return undefined;
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.arrayValue !== undefined) return (v.arrayValue.values ?? []).map(value);
  return null;
}

function attrs(list: OtlpKv[] | undefined): Record<string, unknown> {
  return Object.fromEntries((list ?? []).map((kv) => [kv.key, value(kv.value)]));
}

interface OtlpJson {
  resourceSpans?: Array<{
    resource?: { attributes?: OtlpKv[] };
    scopeSpans?: Array<{
      scope?: { name?: string };
      spans?: Array<{
        traceId: string;
        spanId: string;
        parentSpanId?: string;
        name: string;
        kind: number;
        attributes?: OtlpKv[];
        events?: Array<{ name: string; attributes?: OtlpKv[] }>;
        status?: { code?: number; message?: string };
      }>;
    }>;
  }>;
}

export class OtlpReceiver {
  readonly spans: ReceivedSpan[] = [];
  readonly raw: RawExport[] = [];
  private readonly http: http.Server;
  private readonly grpc = new grpc.Server();
  httpPort = 0;
  grpcPort = 0;

  constructor() {
    this.http = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const body = Buffer.concat(chunks);
        const contentType = String(req.headers['content-type'] ?? '');
        if (req.method !== 'POST' || req.url !== '/v1/traces') {
          res.writeHead(404).end();
          return;
        }
        this.raw.push({ transport: 'http', contentType, body });
        if (contentType.startsWith('application/json')) {
          this.absorb(JSON.parse(body.toString('utf8')) as OtlpJson);
          res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
        } else {
          // An empty ExportTraceServiceResponse is zero bytes of protobuf.
          res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
        }
      });
    });
    const identity = (b: Buffer) => b;
    this.grpc.addService(
      {
        Export: {
          path: '/opentelemetry.proto.collector.trace.v1.TraceService/Export',
          requestStream: false,
          responseStream: false,
          requestSerialize: identity,
          requestDeserialize: identity,
          responseSerialize: identity,
          responseDeserialize: identity,
        },
      },
      {
        Export: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
          this.raw.push({ transport: 'grpc', contentType: 'application/grpc', body: call.request });
          cb(null, Buffer.alloc(0));
        },
      },
    );
  }

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.http.listen(0, '127.0.0.1', resolve));
    this.httpPort = (this.http.address() as AddressInfo).port;
    this.grpcPort = await new Promise<number>((resolve, reject) =>
      this.grpc.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, port) => (err ? reject(err) : resolve(port))),
    );
    return this;
  }

  get httpEndpoint(): string {
    return `http://127.0.0.1:${this.httpPort}`;
  }

  get grpcEndpoint(): string {
    return `http://127.0.0.1:${this.grpcPort}`;
  }

  async close(): Promise<void> {
    this.http.closeAllConnections();
    await new Promise<void>((resolve) => this.http.close(() => resolve()));
    this.grpc.forceShutdown();
  }

  private absorb(doc: OtlpJson): void {
    for (const rs of doc.resourceSpans ?? []) {
      const resource = attrs(rs.resource?.attributes);
      for (const ss of rs.scopeSpans ?? []) {
        for (const s of ss.spans ?? []) {
          this.spans.push({
            traceId: s.traceId,
            spanId: s.spanId,
            parentSpanId: s.parentSpanId ?? '',
            name: s.name,
            kind: s.kind,
            attributes: attrs(s.attributes),
            events: (s.events ?? []).map((e) => ({ name: e.name, attributes: attrs(e.attributes) })),
            status: s.status ?? {},
            resource,
            scope: ss.scope?.name ?? '',
          });
        }
      }
    }
  }
}

/** A grpc.health.v1 client, as Envoy's health checker and Kubernetes' grpc probe use it. */
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { protoPath } from 'grpc-health-check';

type HealthClient = grpc.Client & { Check(req: { service: string }, cb: (e: grpc.ServiceError | null, r: { status: string }) => void): void };

let ctor: grpc.ServiceClientConstructor | undefined;

export async function grpcHealth(target: string, service = ''): Promise<string> {
  if (!ctor) {
    const def = protoLoader.loadSync(protoPath, { keepCase: true, enums: String });
    ctor = (grpc.loadPackageDefinition(def) as unknown as { grpc: { health: { v1: { Health: grpc.ServiceClientConstructor } } } }).grpc.health.v1.Health;
  }
  const client = new ctor(target, grpc.credentials.createInsecure()) as unknown as HealthClient;
  try {
    return await new Promise<string>((resolve, reject) => client.Check({ service }, (e, r) => (e ? reject(e) : resolve(r.status))));
  } finally {
    client.close();
  }
}

# kvgate's image: Node 20, the TypeScript sources run through tsx (no build step), production
# dependencies only. `docker run kvgate serve --config /etc/kvgate/kvgate.yaml` serves the example
# config; mount your own there. Ports: 9002 ext_proc gRPC (+ grpc.health.v1), 9090 admin HTTP
# (/healthz, /readyz, /metrics, /workers): pass --admin-host 0.0.0.0 to reach it from outside.
# Not built here (no Docker engine); test/envoy/deployment.test.ts checks that what it copies
# exists and that the sources import only production dependencies.
FROM node:20-bookworm-slim

WORKDIR /app
ENV NODE_ENV=production
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force
COPY tsconfig.json ./
COPY bin ./bin
COPY src ./src
# The ext_proc service is loaded from these protos at start (src/extproc/proto.ts).
COPY proto ./proto
COPY envoy/kvgate.yaml /etc/kvgate/kvgate.yaml

USER node
EXPOSE 9002 9090
ENTRYPOINT ["node", "bin/kvgate.js"]
CMD ["serve", "--config", "/etc/kvgate/kvgate.yaml"]

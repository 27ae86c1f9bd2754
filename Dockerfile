# kvgate's image: compiled JavaScript on Node 26, the active LTS (supported: 20, 22, 24 and 26),
# production dependencies only, running as the unprivileged `node` user (uid/gid 1000).
#
#   docker build -t kvgate .
#   docker run --rm -p 9002:9002 kvgate                      # the example config
#   docker run --rm -v $PWD/my.yaml:/etc/kvgate/kvgate.yaml:ro -p 9002:9002 kvgate
#
# Ports: 9002 ext_proc gRPC (+ grpc.health.v1), 9090 admin HTTP (/healthz, /readyz, /metrics,
# /workers): pass --admin-host 0.0.0.0 to reach it from outside the container.
# No HEALTHCHECK: Kubernetes ignores it (envoy/kubernetes/kvgate.yaml probes grpc.health.v1 on
# 9002), and the slim image has no curl or grpc client to run one with.
# Signals: node is PID 1 (exec-form ENTRYPOINT, no npm or shell in between) and `kvgate serve`
# installs its own SIGTERM/SIGINT handlers (a PID 1 without them ignores both), then drains.
# Not built on our build machines (no Docker engine there): test/cli/production.test.ts checks
# what it copies exists and that what `serve` imports is a production dependency.

# Build stage: every dependency, TypeScript compiled to dist/, then the development ones dropped.
FROM node:26-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# No dependency needs its install script (package.json's allowScripts denies them all); the
# build is run explicitly below, once the sources are here.
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build && npm prune --omit=dev --ignore-scripts --no-audit --no-fund

# Run stage: no compiler, no sources, no npm cache.
FROM node:26-bookworm-slim
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY bin ./bin
# The ext_proc service is loaded from these protos at start (src/extproc/proto.ts).
COPY proto ./proto
COPY envoy/kvgate.yaml /etc/kvgate/kvgate.yaml
# Numeric, not `node`: a kubelet told runAsNonRoot cannot resolve a user name inside the image
# and refuses to start the container ("image has non-numeric user (node), cannot verify user is
# non-root"). 1000:1000 is the node image's `node` user and group.
USER 1000:1000
EXPOSE 9002 9090
ENTRYPOINT ["node", "bin/kvgate.js"]
CMD ["serve", "--config", "/etc/kvgate/kvgate.yaml"]

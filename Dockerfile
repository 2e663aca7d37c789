# syntax=docker/dockerfile:1
# Inference Network Service. Multi-stage: compile TypeScript with the dev dependencies, then a
# runtime image with production dependencies only, running as the unprivileged `node` user.
# Node 24 (LTS): the newest line every dependency supports (docs/operations.md, "The image"). Built and
# checked by scripts/image/build.sh and check.sh (CI); podman needs `--format docker` to keep
# the HEALTHCHECK.

FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: `prepare` builds, and the sources are not here yet.
RUN npm ci --ignore-scripts
COPY tsconfig.json tsconfig.build.json openapi.json ./
COPY src ./src
COPY scripts ./scripts
COPY web ./web
# The build's embedded-database template holds every migration (scripts/build-pgdata.ts).
COPY migrations ./migrations
RUN npm run build

FROM node:24-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts && npm cache clean --force

FROM node:24-bookworm-slim
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=8000 \
    DATA_DIR=/data
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY --from=build /app/web/dist ./web/dist
COPY package.json openapi.json ./
COPY migrations ./migrations
COPY bin ./bin
# 0700: the embedded database's files are the service's alone (a new volume copies this mode).
# `ins` on the PATH, so an operator types what the server's hints say: docker exec CONTAINER ins node add NAME.
RUN ln -s /app/bin/ins.js /usr/local/bin/ins && mkdir -p /data && chown node:node /data && chmod 700 /data
USER node
# The embedded database lives here when DATABASE_URL is not set.
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||8000)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
# node itself is PID 1 (no npm or shell wrapper): SIGTERM reaches the service's handler, which
# stops accepting, finishes in-flight requests and closes the database.
STOPSIGNAL SIGTERM
ENTRYPOINT ["node", "dist/cli/entry.js"]
CMD ["serve"]

#!/usr/bin/env node
// Submits a job to a Hadar master and lists the jobs, using nothing but protos/hadar/v1.
//
//   npm ci
//   node hadar-example.js --master 127.0.0.1:50051 --token "$HADAR_TOKEN" \
//       --workload resnet --iterations 200 --gpus 1
//
// Prints one JSON object: {"submitted": {...job...}, "jobs": [{id, name, user, state}, ...]}.
// Exit status: 0 on success, 1 when the master refuses or cannot be reached (the gRPC status
// is printed on stderr).
"use strict";

const path = require("path");
const os = require("os");
const crypto = require("crypto");
const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");

// The repository root: protos import each other as "protos/hadar/v1/...".
const REPO_ROOT = path.resolve(__dirname, "..", "..", "..");

function parseArgs(argv) {
  const options = {
    master: process.env.HADAR_MASTER || "127.0.0.1:50051",
    token: process.env.HADAR_TOKEN || "",
    workload: "resnet",
    iterations: 100,
    gpus: 1,
    name: "node-example",
    timeout: 10,
  };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, "");
    if (!(key in options) || i + 1 >= argv.length) {
      throw new Error(`unknown or incomplete option ${argv[i]}`);
    }
    const value = argv[i + 1];
    options[key] = typeof options[key] === "number" ? Number(value) : value;
  }
  return options;
}

function loadHadarService() {
  const definition = protoLoader.loadSync("protos/hadar/v1/hadar.proto", {
    includeDirs: [REPO_ROOT],
    keepCase: true,
    longs: String, // uint64 ids arrive as decimal strings: JavaScript numbers lose precision
    enums: String, // "JOB_STATE_PENDING" rather than 1
    defaults: true,
    oneofs: true,
  });
  return grpc.loadPackageDefinition(definition).hadar.v1.Hadar;
}

function callMetadata(token) {
  const metadata = new grpc.Metadata();
  if (token) {
    metadata.add("authorization", `Bearer ${token}`);
  }
  metadata.add("x-hadar-user", os.userInfo().username);
  return metadata;
}

// One unary call as a promise, with a deadline.
function call(client, method, request, metadata, timeoutSeconds) {
  const deadline = new Date(Date.now() + timeoutSeconds * 1000);
  return new Promise((resolve, reject) => {
    client[method](request, metadata, { deadline }, (error, response) =>
      error ? reject(error) : resolve(response),
    );
  });
}

async function main() {
  const options = parseArgs(process.argv.slice(2));
  const Hadar = loadHadarService();
  const client = new Hadar(options.master, grpc.credentials.createInsecure());
  const metadata = callMetadata(options.token);
  try {
    const submitted = await call(
      client,
      "SubmitJob",
      {
        spec: {
          name: options.name,
          num_gpus: options.gpus,
          iterations: String(options.iterations),
          workload: { name: options.workload },
        },
        // Makes a retried submit return the same job instead of a duplicate.
        idempotency_key: crypto.randomUUID(),
      },
      metadata,
      options.timeout,
    );
    const listed = await call(client, "ListJobs", { page_size: 1000 }, metadata, options.timeout);
    const summary = {
      submitted: {
        id: submitted.job.id,
        name: submitted.job.spec.name,
        user: submitted.job.user,
        state: submitted.job.state,
      },
      jobs: listed.jobs.map((job) => ({
        id: job.id,
        name: job.spec.name,
        user: job.user,
        state: job.state,
      })),
    };
    process.stdout.write(JSON.stringify(summary) + "\n");
    return 0;
  } catch (error) {
    const code = error.code !== undefined ? grpc.status[error.code] : "ERROR";
    process.stderr.write(`error: ${code}: ${error.details || error.message}\n`);
    return 1;
  } finally {
    client.close();
  }
}

main().then(
  (status) => process.exit(status),
  (error) => {
    process.stderr.write(`error: ${error.message}\n`);
    process.exit(2);
  },
);

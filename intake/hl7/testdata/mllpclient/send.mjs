// Sends HL7 v2 messages to an MLLP listener with node-hl7-client and
// prints each acknowledgement as one JSON line, as that library reads it.
//
//   node send.mjs PORT MESSAGES.json
//
// MESSAGES.json is a JSON array of message texts (segments ending in \r).
// Each is parsed by the library (new Message({text})) and sent on one
// connection that waits for each ACK before sending the next.
import { readFileSync } from 'node:fs'
import { Client, Message } from 'node-hl7-client'

const [port, file] = process.argv.slice(2)
const texts = JSON.parse(readFileSync(file, 'utf8'))

const acks = []
let resolveNext
const client = new Client({ host: '127.0.0.1', connectionTimeout: 0 })
const conn = client.createConnection({ port: Number(port), waitAck: true, maxConnectionAttempts: 5, retryLow: 100 }, async (res) => {
  const m = res.getMessage()
  const errs = []
  const list = m.get('ERR')
  if (list && list.length > 0 && m.get('ERR.1') !== undefined) {
    list.forEach((seg) => {
      const parts = []
      for (let c = 1; c <= 6; c++) parts.push(seg.get(`2.${c}`).toString())
      while (parts.length > 0 && parts[parts.length - 1] === '') parts.pop()
      if (parts.length > 0) errs.push(`${parts.join('^')}|${seg.get('3.1').toString()}`)
    })
  }
  const ack = { msa1: m.get('MSA.1').toString(), msa2: m.get('MSA.2').toString(), msa3: m.get('MSA.3').toString(), type: m.get('MSH.9').toString(), errs }
  acks.push(ack)
  if (resolveNext) { const r = resolveNext; resolveNext = undefined; r() }
})

for (const text of texts) {
  const waited = new Promise((resolve) => { resolveNext = resolve })
  await conn.sendMessage(new Message({ text }))
  await Promise.race([waited, new Promise((_, reject) => setTimeout(() => reject(new Error('no ACK within 20s')), 20000))])
}
for (const a of acks) console.log(JSON.stringify(a))
await conn.close()
process.exit(0)
